// The seam between the HTTP routes (http_server.cpp: one route table, the
// header checks, request -> response) and a transport that parses, bounds
// and writes HTTP (beast_transport.cpp: Boost.Beast over
// Boost.Asio). Internal to the server layer.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::server {

// One request as a transport hands it to the routes: the headers, and the
// body once read (empty for check()).
struct HttpRequest {
  std::string method;       // "GET", "POST", ...
  std::string path;         // without the query
  std::string remote_addr;  // for the request log
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  const void* key = nullptr;  // identifies the request for the log (begin in check(), end in done())
  // The first value of a header (case-insensitive name); "" when absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// A response: a whole body, or (stream set) an SSE stream the transport
// frames (chunked) while `stream` writes events through `write`, which
// returns false once the client is gone; `stream` returns whether it ended
// the response normally.
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::function<bool(const std::function<bool(std::string_view)>& write)> stream;
};

// What a transport calls. check() runs on the headers alone, before any body
// is read (host, API key, content type and encoding, declared length): a
// response there refuses the request. handle() answers a whole request; for
// POST it may block until generation ends (transports run it off their I/O
// thread); for other methods it never blocks. done() once the response is
// written (or the connection failed), with the status sent.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual std::optional<HttpResponse> check(const HttpRequest& req) = 0;
  virtual void handle(const HttpRequest& req, HttpResponse& res) = 0;
  virtual void done(const HttpRequest& req, int status) = 0;
};

struct TransportOptions {
  std::string host;
  int port = 0;
  size_t max_body = 1 << 20;
  size_t max_header_bytes = 64 << 10;  // a request's start line and headers together (431 above)
  double read_timeout_s = 30;          // to read one whole request, headers and body (408 after)
  double write_timeout_s = 30;
  int max_connections = 256;  // open connections (503 beyond)
  int handler_threads = 8;    // threads that run handle() for POSTs (requests waiting for generation)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int bind() = 0;  // returns the bound port; throws strata::Error
  virtual void run() = 0;  // serves until stop()
  // From any thread, also before or while run() starts; `started`: run() was
  // or is being called (a stop that races its start must wait for it).
  virtual void stop(bool started) = 0;
};

std::unique_ptr<Transport> make_beast_transport(HttpHandler& h, const TransportOptions& o);

// Throws why host:port cannot be listened on, named for a person (tries the
// same bind once more on a socket of its own to learn the errno).
[[noreturn]] void fail_bind(const std::string& host, int port);

}  // namespace strata::server
