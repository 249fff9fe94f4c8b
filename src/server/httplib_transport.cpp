// The cpp-httplib transport (strata serve --http httplib): a thread per
// connection from a pool; httplib bounds a body only by its Content-Length
// and a header line only after reading it (docs/security.md). The routes and
// checks are the HttpHandler's.
#include <httplib.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/json.h"
#include "server/http_transport.h"
#include "server/openai_request.h"

namespace strata::server {

namespace {

HttpRequest view_of(const httplib::Request& r, bool with_body) {
  HttpRequest q;
  q.method = r.method;
  q.path = r.path;
  q.remote_addr = r.remote_addr;
  q.key = &r;
  q.headers.reserve(r.headers.size());
  for (const auto& [k, v] : r.headers) q.headers.emplace_back(k, v);
  if (with_body) q.body = r.body;
  return q;
}

void put(const HttpResponse& from, httplib::Response& to) {
  to.status = from.status;
  if (!from.stream) {
    to.set_content(from.body, from.content_type.c_str());
    return;
  }
  to.set_header("Cache-Control", "no-cache");
  auto stream = from.stream;
  to.set_chunked_content_provider(from.content_type.c_str(), [stream](size_t, httplib::DataSink& sink) {
    const bool ok = stream([&sink](std::string_view s) { return sink.write(s.data(), s.size()); });
    if (ok) sink.done();
    return ok;
  });
}

class HttplibTransport final : public Transport {
 public:
  HttplibTransport(HttpHandler& h, const TransportOptions& o) : h_(h), o_(o) {
    const size_t threads = static_cast<size_t>(o.handler_threads);
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would let a
    // second server share the port silently); remember the socket.
    http_.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd_ = sock;
    });
    http_.set_payload_max_length(o.max_body);
    http_.set_read_timeout(static_cast<time_t>(o.read_timeout_s), 0);
    http_.set_write_timeout(static_cast<time_t>(o.write_timeout_s), 0);
    http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      h_.done(view_of(req, false), res.status);
    });
    // Everything here is decided from the headers, before a body is read.
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (auto r = h_.check(view_of(req, false))) {
        put(*r, res);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e{res.status, "", "", "invalid_request_error", ""};
      if (res.status == 404) e.message = "no such endpoint", e.code = "not_found";
      else if (res.status == 413) e.message = "the request body is too large", e.code = "request_too_large";
      else if (res.status == 405) e.message = "method not allowed";
      else e.message = fmt::format("HTTP {}", res.status);
      if (res.status >= 500) e.type = "server_error";
      res.set_content(error_json(e).dump(), "application/json");
    });
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      res.status = 500;
      res.set_content(error_json(ApiError{500, "internal error", "", "server_error", ""}).dump(), "application/json");
    });
    auto route = [this](const httplib::Request& req, httplib::Response& res) {
      HttpResponse r;
      h_.handle(view_of(req, true), r);
      put(r, res);
    };
    for (const char* p : {"/health", "/", "/v1/models", "/v1/stats", "/v1/stats/history", "/metrics"})
      http_.Get(p, route);
    for (const char* p : {"/v1/chat/completions", "/v1/completions"}) http_.Post(p, route);
  }

  int bind() override {
    int port = -1;
    if (o_.port == 0) port = http_.bind_to_any_port(o_.host);
    else port = http_.bind_to_port(o_.host, o_.port) ? o_.port : -1;
    if (port <= 0) fail_bind(o_.host, o_.port);
    // httplib listens with a backlog of 5: a burst of clients overflows it and
    // some connections fail to read. Listening again only widens the queue.
    if (listen_fd_ >= 0) ::listen(listen_fd_, 1024);
    return port;
  }
  void run() override {
    http_.listen_after_bind();
    over_ = true;
  }
  void stop(bool started) override {
    // httplib's stop() does nothing until its loop runs: wait for it.
    while (started && !over_ && !http_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    http_.stop();
  }

 private:
  HttpHandler& h_;
  TransportOptions o_;
  httplib::Server http_;
  int listen_fd_ = -1;
  std::atomic<bool> over_{false};
};

}  // namespace

std::unique_ptr<Transport> make_httplib_transport(HttpHandler& h, const TransportOptions& o) {
  return std::make_unique<HttplibTransport>(h, o);
}

void fail_bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int g = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); g != 0)
    fail("serve: cannot listen on {}:{}: --host {} does not resolve ({})", host, port, host, ::gai_strerror(g));
  int err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const int r = ::bind(fd, a->ai_addr, a->ai_addrlen);
    err = r == 0 ? 0 : errno;
    ::close(fd);
    if (err != 0) break;
  }
  ::freeaddrinfo(res);
  switch (err) {
    case EADDRINUSE:
      fail("serve: port {} on {} is in use (EADDRINUSE); choose another with --port", port, host);
    case EACCES:
      fail("serve: cannot listen on {}:{}: permission denied (EACCES; ports below 1024 need privileges); choose "
           "another with --port",
           host, port);
    case EADDRNOTAVAIL:
      fail("serve: cannot listen on {}:{}: {} is not an address of this machine (EADDRNOTAVAIL); check --host", host,
           port, host);
    case 0:
      fail("serve: cannot listen on {}:{} (the address is free now: it was taken in between; try again)", host, port);
    default:
      fail("serve: cannot listen on {}:{}: {} (errno {})", host, port, std::strerror(err), err);
  }
}

}  // namespace strata::server
