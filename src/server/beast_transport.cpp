// The Boost.Beast transport (strata serve --http beast, docs/security.md):
// one Asio I/O thread (the one that calls run()) accepts, reads and parses
// every connection, bounding while it reads: the start line and headers
// together (max_header_bytes, 431, also for one endless line), the body by
// the cap whether sized or chunked (413, counted as it arrives), one deadline
// for a whole request (408) and a limit on open connections (503). An idle
// or slow connection holds no thread. A whole request goes to handle():
// a GET on the I/O thread (it never blocks), a POST on a handler thread (it
// waits for the scheduler thread's generation); the handler thread's
// responses are written by the I/O thread, which it waits for.
// Boost 1.74's asio/awaitable.hpp uses std::exchange without <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "server/http_transport.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace strata::server {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

// After a refusal sent before the body was read, what the client still sends
// is read and dropped for a moment (bounded) before the close, so that the
// close does not reset the connection before the client read the answer.
constexpr size_t kLingerBytes = size_t{1} << 20;
constexpr auto kLingerTime = std::chrono::seconds(1);

std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

std::string error_body(int status, const std::string& message, const char* code) {
  return dump_reply(error_json(ApiError{status, message, "", status >= 500 ? "server_error" : "invalid_request_error", code}));
}

// A whole response's bytes (HEAD: without the body, its length kept).
std::string serialize(const HttpResponse& r, bool keep_alive, bool head) {
  const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(r.status));
  std::string s = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
                              r.status, std::string_view(reason.data(), reason.size()), r.content_type, r.body.size(),
                              keep_alive ? "keep-alive" : "close");
  if (!head) s += r.body;
  return s;
}

class BeastTransport;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(BeastTransport& t, tcp::socket socket);
  ~Connection();
  void start() { read_request(); }
  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  void read_request();
  void on_header(beast::error_code ec);
  void on_body(beast::error_code ec);
  void dispatch();
  void answer_on_io(const HttpResponse& r);  // I/O thread; then the next request or close
  void serve_on_worker();                    // a handler thread
  bool write_from_worker(std::string bytes);
  void refuse(int status, const std::string& message, const char* code);  // write, linger, close
  void refuse(const HttpResponse& r);
  void linger();
  void after_answer(bool keep);

  BeastTransport& t_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest req_;
  bool keep_alive_ = false, head_ = false, began_ = false;
  std::array<char, 16384> sink_{};
  // The request's read deadline: its own timer, which cancels the read (the
  // stream's expiry would close the socket before a 408 could be sent).
  net::steady_timer deadline_;
  bool timed_out_ = false;
  size_t lingered_ = 0;
};

class BeastTransport final : public Transport {
 public:
  BeastTransport(HttpHandler& handler, const TransportOptions& opts)
      : h(handler), o(opts), pool_(static_cast<size_t>(std::max(1, opts.handler_threads))) {}
  ~BeastTransport() override { stop(false); }

  int bind() override {
    beast::error_code ec;
    tcp::endpoint ep;
    const net::ip::address addr = net::ip::make_address(o.host, ec);
    if (!ec) {
      ep = tcp::endpoint(addr, static_cast<unsigned short>(o.port));
    } else {
      tcp::resolver resolver(ioc_);
      const auto results = resolver.resolve(o.host, std::to_string(o.port), ec);
      if (ec || results.empty()) fail_bind(o.host, o.port);
      ep = *results.begin();
    }
    // SO_REUSEADDR only: a second server on the same port fails to bind.
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(1024, ec);
    if (ec) {
      beast::error_code ignored;
      acceptor_.close(ignored);
      fail_bind(o.host, o.port);
    }
    return acceptor_.local_endpoint().port();
  }

  void run() override {
    accept();
    ioc_.run();
  }

  void stop(bool) override {
    if (stopping.exchange(true)) return;
    // Close the listener and every connection on the I/O thread; handler
    // threads (their jobs cancelled by the scheduler's shutdown) then fail
    // their writes and end; then the I/O loop ends.
    net::post(ioc_, [this] {
      beast::error_code ec;
      acceptor_.close(ec);
      std::vector<std::shared_ptr<Connection>> open;
      {
        std::lock_guard l(mu_);
        for (auto& [p, w] : sessions_)
          if (auto s = w.lock()) open.push_back(std::move(s));
      }
      for (auto& s : open) s->close();
    });
    pool_.join();
    guard_.reset();
    ioc_.stop();
  }

  void add(Connection* s, const std::shared_ptr<Connection>& sp) {
    std::lock_guard l(mu_);
    sessions_[s] = sp;
  }
  void remove(Connection* s) {
    std::lock_guard l(mu_);
    sessions_.erase(s);
    --connections_;
  }

  HttpHandler& h;
  const TransportOptions o;
  std::atomic<bool> stopping{false};

 private:
  // Before the I/O objects: handlers still pending when they are destroyed
  // end their sessions, which unlist themselves here.
  std::mutex mu_;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> sessions_;
  std::atomic<int> connections_{0};

 public:
  net::io_context ioc_{1};
  net::thread_pool pool_;

 private:
  void accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (stopping || ec == net::error::operation_aborted) return;
      if (!ec) {
        if (connections_ >= o.max_connections) {
          turn_away(std::move(socket));
        } else {
          ++connections_;
          auto s = std::make_shared<Connection>(*this, std::move(socket));
          add(s.get(), s);
          s->start();
        }
        accept();
        return;
      }
      // E.g. out of descriptors: back off instead of spinning.
      auto t = std::make_shared<net::steady_timer>(ioc_, std::chrono::milliseconds(50));
      t->async_wait([this, t](beast::error_code) {
        if (!stopping) accept();
      });
    });
  }

  // Beyond max_connections: a 503 and close, the request never read.
  void turn_away(tcp::socket socket) {
    auto sock = std::make_shared<tcp::socket>(std::move(socket));
    HttpResponse r;
    r.status = 503;
    r.body = error_body(503, fmt::format("too many connections (at most {}); retry later", o.max_connections),
                        "too_many_connections");
    auto bytes = std::make_shared<std::string>(serialize(r, false, false));
    net::async_write(*sock, net::buffer(*bytes), [sock, bytes](beast::error_code, size_t) {
      beast::error_code ec;
      sock->shutdown(tcp::socket::shutdown_both, ec);
      sock->close(ec);
    });
  }

  tcp::acceptor acceptor_{ioc_};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard_{net::make_work_guard(ioc_)};
};

Connection::Connection(BeastTransport& t, tcp::socket socket)
    : t_(t), stream_(std::move(socket)), buf_(t.o.max_header_bytes + 16384), deadline_(stream_.get_executor()) {
  beast::error_code ec;
  const auto ep = stream_.socket().remote_endpoint(ec);
  if (!ec) req_.remote_addr = ep.address().to_string();
}
Connection::~Connection() {
  if (began_) t_.h.done(req_, 0);
  t_.remove(this);
}

void Connection::read_request() {
  if (t_.stopping) return close();
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(t_.o.max_header_bytes, UINT32_MAX)));
  // The body's cap is set once the headers passed check() (which answers a
  // too large Content-Length 413, after the key: 401 first).
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // (1.74: none compares as below any length)
  // One deadline for the whole request, headers and body: a client that
  // trickles bytes cannot hold the connection past it.
  stream_.expires_never();
  timed_out_ = false;
  deadline_.expires_after(secs(t_.o.read_timeout_s));
  deadline_.async_wait([w = weak_from_this()](beast::error_code ec) {
    if (ec) return;
    if (auto self = w.lock()) {
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    }
  });
  bhttp::async_read_header(stream_, buf_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(beast::error_code ec) {
  if (ec && timed_out_) ec = beast::error::timeout;
  if (ec) {
    deadline_.cancel();
    // A client that closed or stayed idle between requests, or the server
    // stopping: close without a word.
    // (The parser takes nothing until the headers are whole: bytes waiting
    // in the buffer are a request begun.)
    const bool begun = parser_->got_some() || buf_.size() > 0;
    if (t_.stopping || (!begun && ec != bhttp::error::header_limit && ec != bhttp::error::buffer_overflow) ||
        ec == bhttp::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted)
      return close();
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow)
      return refuse(431, fmt::format("the request line and headers exceed {} bytes", t_.o.max_header_bytes),
                    "request_header_fields_too_large");
    if (ec == bhttp::error::body_limit)  // a Content-Length above the cap, seen by the parser
      return refuse(413, fmt::format("the request body is too large (at most {} bytes)", t_.o.max_body),
                    "request_too_large");
    if (ec == beast::error::timeout)
      return refuse(408, fmt::format("the request was not received within {} s", t_.o.read_timeout_s),
                    "request_timeout");
    return refuse(400, fmt::format("malformed HTTP request: {}", ec.message()), "bad_request");
  }
  const auto& h = parser_->get();
  req_.method = std::string(h.method_string());
  const std::string_view target(h.target().data(), h.target().size());
  req_.path = std::string(target.substr(0, target.find('?')));
  req_.headers.clear();
  for (const auto& f : h) req_.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req_.body.clear();
  req_.key = this;
  keep_alive_ = h.keep_alive() && h.version() >= 11;
  head_ = h.method() == bhttp::verb::head;
  began_ = true;
  if (auto r = t_.h.check(req_)) return refuse(*r);
  parser_->body_limit(t_.o.max_body);
  if (parser_->is_done()) {
    deadline_.cancel();
    return dispatch();
  }
  auto read_body = [self = shared_from_this()] {
    bhttp::async_read(self->stream_, self->buf_, *self->parser_,
                      [self](beast::error_code ec, size_t) { self->on_body(ec); });
  };
  if (beast::iequals(h[bhttp::field::expect], "100-continue")) {
    auto bytes = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    net::async_write(stream_, net::buffer(*bytes), [self = shared_from_this(), bytes, read_body](beast::error_code ec, size_t) {
      if (ec) return self->close();
      read_body();
    });
    return;
  }
  read_body();
}

void Connection::on_body(beast::error_code ec) {
  if (ec && timed_out_) ec = beast::error::timeout;
  deadline_.cancel();
  if (ec) {
    if (t_.stopping || ec == bhttp::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted)
      return close();
    if (ec == bhttp::error::body_limit)
      return refuse(413, fmt::format("the request body is too large (at most {} bytes)", t_.o.max_body),
                    "request_too_large");
    if (ec == beast::error::timeout)
      return refuse(408, fmt::format("the request was not received within {} s", t_.o.read_timeout_s),
                    "request_timeout");
    return refuse(400, fmt::format("malformed HTTP request: {}", ec.message()), "bad_request");
  }
  req_.body = std::move(parser_->get().body());
  dispatch();
}

void Connection::dispatch() {
  stream_.expires_never();
  if (req_.method != "POST") {
    HttpResponse r;
    t_.h.handle(req_, r);
    return answer_on_io(r);
  }
  net::post(t_.pool_, [self = shared_from_this()] { self->serve_on_worker(); });
}

void Connection::answer_on_io(const HttpResponse& r) {
  auto bytes = std::make_shared<std::string>(serialize(r, keep_alive_, head_));
  const int status = r.status;
  stream_.expires_after(secs(t_.o.write_timeout_s));
  net::async_write(stream_, net::buffer(*bytes), [self = shared_from_this(), bytes, status](beast::error_code ec, size_t) {
    self->t_.h.done(self->req_, ec ? 0 : status);
    self->began_ = false;
    self->after_answer(!ec && self->keep_alive_);
  });
}

void Connection::after_answer(bool keep) {
  if (!keep || t_.stopping) return close();
  read_request();
}

// Runs on a handler thread: the I/O thread writes, this one waits for it.
bool Connection::write_from_worker(std::string bytes) {
  if (t_.stopping) return false;
  auto done = std::make_shared<std::promise<bool>>();
  auto f = done->get_future();
  auto data = std::make_shared<std::string>(std::move(bytes));
  net::post(stream_.get_executor(), [self = shared_from_this(), data, done] {
    self->stream_.expires_after(secs(self->t_.o.write_timeout_s));
    net::async_write(self->stream_, net::buffer(*data),
                     [data, done](beast::error_code ec, size_t) { done->set_value(!ec); });
  });
  return f.get();
}

void Connection::serve_on_worker() {
  HttpResponse r;
  t_.h.handle(req_, r);
  bool ok = false;
  if (!r.stream) {
    ok = write_from_worker(serialize(r, keep_alive_, false));
  } else {
    std::string head = fmt::format(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
        "Connection: {}\r\n\r\n",
        r.content_type, keep_alive_ ? "keep-alive" : "close");
    ok = write_from_worker(std::move(head));
    if (ok)
      ok = r.stream([this](std::string_view piece) {
        if (piece.empty()) return true;
        return write_from_worker(fmt::format("{:x}\r\n", piece.size()) + std::string(piece) + "\r\n");
      });
    if (ok) ok = write_from_worker("0\r\n\r\n");
  }
  t_.h.done(req_, r.status);
  began_ = false;
  net::post(stream_.get_executor(), [self = shared_from_this(), keep = ok && keep_alive_] { self->after_answer(keep); });
}

void Connection::refuse(int status, const std::string& message, const char* code) {
  HttpResponse r;
  r.status = status;
  r.body = error_body(status, message, code);
  refuse(r);
}

void Connection::refuse(const HttpResponse& r) {
  auto bytes = std::make_shared<std::string>(serialize(r, false, false));
  const int status = r.status;
  stream_.expires_after(secs(t_.o.write_timeout_s));
  net::async_write(stream_, net::buffer(*bytes), [self = shared_from_this(), bytes, status](beast::error_code ec, size_t) {
    if (self->began_) self->t_.h.done(self->req_, ec ? 0 : status);
    self->began_ = false;
    if (ec) return self->close();
    beast::error_code ignored;
    self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    self->stream_.expires_after(kLingerTime);
    self->linger();
  });
}

void Connection::linger() {
  stream_.async_read_some(net::buffer(sink_), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->lingered_ += n;
    if (ec || self->lingered_ >= kLingerBytes || self->t_.stopping) return self->close();
    self->linger();
  });
}

}  // namespace

std::unique_ptr<Transport> make_beast_transport(HttpHandler& h, const TransportOptions& o) {
  return std::make_unique<BeastTransport>(h, o);
}

}  // namespace strata::server
