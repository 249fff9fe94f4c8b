// strata serve against hostile input (issue 15, docs/security.md): one request
// must never crash the server or take it down for others. In-process servers
// over the tiny bf16 fixture with a byte-level tokenizer, driven by httplib's
// client: tool-call arguments nested far deeper than the stack allows (400,
// the server stays up), a scheduler step that throws (the request ends with
// the error, the next one is served), invalid UTF-8 in the operator's model id
// and in a generated tool call (replaced, never a throw mid-stream), a stop
// that comes before the server runs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/json.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "server/glm_output.h"
#include "server/http_server.h"
#include "server/scheduler.h"
#include "text/generation_config.h"
#include "text/tokenizer.h"

namespace strata::server_hardening_test {
namespace {

const std::string kModelDir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16";
const std::string kTokenizer = std::string(STRATA_SOURCE_DIR) + "/tests/chat/byte-tokenizer.json";

struct Shared {
  std::shared_ptr<const Model> model = load_model(kModelDir, LoadOptions{.load_mtp = false});
  Tokenizer tok = Tokenizer::load(kTokenizer);
  GenerationConfig gen = load_generation_config(kModelDir);
};
Shared& shared() {
  static Shared s;
  return s;
}

std::unique_ptr<Engine> tiny_engine() {
  EngineOptions eo;
  eo.threads = 1;
  eo.verbose = false;
  return std::make_unique<Engine>(shared().model, eo);
}

server::ServerModel server_model(Engine& e) {
  server::ServerModel sm;
  sm.engine = &e;
  sm.tok = &shared().tok;
  sm.stop_ids = {253, 254, 255};
  return sm;
}

// One server on 127.0.0.1 (ephemeral port), serving on a thread.
class LiveServer {
 public:
  explicit LiveServer(server::ServerOptions o = {}, ChatDialect dialect = ChatDialect::Raw) {
    o.host = "127.0.0.1";
    o.port = 0;
    if (o.sched.ctx == 4096) o.sched.ctx = 256;
    if (o.model_id == "strata") o.model_id = "tiny";
    engine_ = tiny_engine();
    ChatTemplate t;
    t.dialect = dialect;
    t.source = "test";
    srv_ = std::make_unique<server::Server>(server_model(*engine_), t, shared().gen, o);
    port_ = srv_->bind();
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~LiveServer() {
    srv_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::pair<int, std::string> post(const std::string& path, const std::string& body) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    if (!r) return {0, "no response: " + httplib::to_string(r.error())};
    return {r->status, r->body};
  }
  std::pair<int, std::string> get(const std::string& path) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    auto r = c.Get(path.c_str());
    if (!r) return {0, "no response: " + httplib::to_string(r.error())};
    return {r->status, r->body};
  }

 private:
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<server::Server> srv_;
  int port_ = 0;
  std::thread thread_;
};

// SSE body -> its data payloads.
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  for (size_t i = 0, e; (e = body.find("\n\n", i)) != std::string::npos; i = e + 2) {
    const std::string ev = body.substr(i, e - i);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    out.push_back(ev.substr(6));
  }
  return out;
}

// Arguments nested 50,000 deep inside a string (a ~400 KB body, under the
// 1 MiB cap; the body's own 64-level bound does not see into strings):
// refused with 400 naming the field, and the server goes on serving.
TEST(ServerHardening, DeeplyNestedToolArgumentsAre400) {
  LiveServer s({}, ChatDialect::Glm);
  std::string args;
  constexpr int kDepth = 50000;
  for (int i = 0; i < kDepth; ++i) args += R"({"a":)";
  args += "1";
  args += std::string(kDepth, '}');
  Json body;
  body["messages"] = Json::array();
  body["messages"].push_back({{"role", "user"}, {"content", "hi"}});
  body["messages"].push_back({{"role", "assistant"},
                              {"content", ""},
                              {"tool_calls", Json::array({{{"id", "c1"},
                                                           {"type", "function"},
                                                           {"function", {{"name", "f"}, {"arguments", args}}}}})}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}});
  body["max_tokens"] = 2;
  const std::string text = body.dump();
  ASSERT_LT(text.size(), size_t{1} << 20);
  const auto [status, reply] = s.post("/v1/chat/completions", text);
  ASSERT_EQ(status, 400) << reply.substr(0, 300);
  const Json e = Json::parse(reply);
  EXPECT_EQ(e["error"]["param"], "messages[1].tool_calls") << reply.substr(0, 300);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("deeper than"), std::string::npos) << reply.substr(0, 300);
  EXPECT_EQ(s.get("/health").first, 200);
  EXPECT_EQ(s.post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})").first,
            200);
}

// A request the scheduler thread cannot start (here: a prompt longer than
// the context, which the HTTP side would have refused) ends with its error;
// the thread survives and serves the next one.
TEST(ServerHardening, SchedulerSurvivesAThrowingRequest) {
  auto engine = tiny_engine();
  server::SchedulerOptions so;
  so.ctx = 32;
  server::Scheduler sched(server_model(*engine), so);
  auto bad = std::make_shared<server::Job>();
  bad->prompt.assign(40, 7);
  bad->max_tokens = 2;
  ASSERT_TRUE(sched.submit(bad));
  std::string text;
  std::vector<TokenLogprob> lps;
  for (int i = 0; i < 300 && !bad->take(text, lps, 100); ++i) {
  }
  ASSERT_EQ(bad->finish, server::Finish::Error);
  EXPECT_NE(bad->error.find("context"), std::string::npos) << bad->error;
  auto good = std::make_shared<server::Job>();
  good->prompt = {1, 2, 3};
  good->max_tokens = 3;
  good->ignore_eos = true;
  good->sampling.temperature = 0;
  ASSERT_TRUE(sched.submit(good));
  for (int i = 0; i < 300 && !good->take(text, lps, 100); ++i) {
  }
  EXPECT_EQ(good->finish, server::Finish::Length);
  EXPECT_EQ(good->completion_tokens, 3);
  EXPECT_EQ(sched.stats().errors, 1u);
}

// A tool call the model generated with invalid UTF-8 in an argument: the
// answer's tool_calls hold replacement characters; nothing throws (a throw
// while streaming used to end the process).
TEST(ServerHardening, GeneratedToolCallWithInvalidUtf8) {
  server::IdSource ids;
  const std::string out = "<tool_call>f<arg_key>k</arg_key><arg_value>\xff\xfe</arg_value></tool_call>";
  server::ChatOutput co{true, false, nullptr};
  server::ChatDeltaStream stream(co);
  EXPECT_NO_THROW(stream.next(out));
  std::string finish = "stop";
  Json last;
  ASSERT_NO_THROW(last = stream.last(ids, finish));
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_TRUE(last.contains("tool_calls")) << server::dump_reply(last);
  const std::string args = last["tool_calls"][0]["function"]["arguments"].get<std::string>();
  EXPECT_EQ(Json::parse(args)["k"], "\xEF\xBF\xBD\xEF\xBF\xBD");
  std::string finish2 = "stop";
  Json msg;
  ASSERT_NO_THROW(msg = server::chat_message(co, out, ids, finish2));
  EXPECT_EQ(finish2, "tool_calls");
}

// The operator's model id (a directory name) with invalid UTF-8: every
// response that carries it is valid JSON, streamed or not.
TEST(ServerHardening, InvalidUtf8ModelId) {
  server::ServerOptions o;
  o.model_id = "tiny\xff\xc3";
  LiveServer s(o);
  const auto [ms, models] = s.get("/v1/models");
  ASSERT_EQ(ms, 200) << models;
  EXPECT_EQ(Json::parse(models)["data"][0]["id"], "tiny\xEF\xBF\xBD\xEF\xBF\xBD");
  const auto [ss, stats] = s.get("/v1/stats");
  ASSERT_EQ(ss, 200) << stats;
  EXPECT_NO_THROW(Json::parse(stats));
  EXPECT_EQ(s.get("/metrics").first, 200);
  const auto [cs, sse] = s.post(
      "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,"logprobs":true,"top_logprobs":2,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(cs, 200) << sse;
  const auto ev = sse_events(sse);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const Json j = Json::parse(ev[i]);
    EXPECT_FALSE(j.contains("error")) << ev[i];
  }
  EXPECT_EQ(s.get("/health").first, 200);
}

// A stop() that lands before run() (a signal while the server binds): run()
// returns at once instead of serving 429s forever.
TEST(ServerHardening, StopBeforeRunEndsRun) {
  auto engine = tiny_engine();
  ChatTemplate t;
  t.dialect = ChatDialect::Raw;
  t.source = "test";
  server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.sched.ctx = 256;
  server::Server srv(server_model(*engine), t, shared().gen, o);
  ASSERT_GT(srv.bind(), 0);
  srv.stop();
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread runner([&srv, done] {
    srv.run();
    *done = true;
  });
  for (int i = 0; i < 500 && !*done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool returned = *done;
  if (!returned) srv.stop();  // what used to be needed: a second stop once it listens
  runner.join();
  EXPECT_TRUE(returned) << "run() after stop() went on serving";
}

// DNS rebinding and pages that post to a local server: only addresses,
// localhost, --host and --allow-host names are answered to, in Host and Origin.
TEST(ServerHardening, HostAndOriginAreChecked) {
  server::ServerOptions o;
  EXPECT_TRUE(server::host_allowed(o, "127.0.0.1:8080", ""));
  EXPECT_TRUE(server::host_allowed(o, "[::1]:8080", "http://localhost:8080"));
  EXPECT_TRUE(server::host_allowed(o, "LOCALHOST", ""));
  EXPECT_TRUE(server::host_allowed(o, "10.1.2.3:80", "https://10.1.2.3"));
  EXPECT_TRUE(server::host_allowed(o, "", ""));  // HTTP/1.0: no Host
  EXPECT_FALSE(server::host_allowed(o, "evil.example:8080", ""));
  EXPECT_FALSE(server::host_allowed(o, "127.0.0.1:8080", "http://evil.example"));
  EXPECT_FALSE(server::host_allowed(o, "127.0.0.1:8080", "null"));
  EXPECT_FALSE(server::host_allowed(o, "localhost.evil.example", ""));
  o.allowed_hosts = {"llm.internal"};
  EXPECT_TRUE(server::host_allowed(o, "LLM.internal:8080", "https://llm.internal:8443/"));
  EXPECT_FALSE(server::host_allowed(o, "other.internal", ""));
  o.host = "box.lan";
  EXPECT_TRUE(server::host_allowed(o, "box.lan:8080", ""));
  o.allowed_hosts = {"*"};
  EXPECT_TRUE(server::host_allowed(o, "anything", "null"));
}

// The same against a live server: 403 for a foreign Host or Origin, 415 for a
// body that is not declared JSON (a page may post text/plain without asking).
TEST(ServerHardening, LiveServerRefusesForeignHostsAndNonJson) {
  LiveServer s;
  const std::string body = R"({"prompt":"hi","max_tokens":1})";
  auto post = [&](const httplib::Headers& h, const char* type) {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(60, 0);
    auto r = c.Post("/v1/completions", h, body, type);
    return r ? r->status : 0;
  };
  EXPECT_EQ(post({}, "application/json"), 200);
  EXPECT_EQ(post({}, "application/json; charset=utf-8"), 200);
  EXPECT_EQ(post({{"Origin", "http://127.0.0.1:" + std::to_string(s.port())}}, "application/json"), 200);
  EXPECT_EQ(post({{"Host", "evil.example:" + std::to_string(s.port())}}, "application/json"), 403);
  EXPECT_EQ(post({{"Origin", "http://evil.example"}}, "application/json"), 403);
  EXPECT_EQ(post({}, "text/plain"), 415);
  EXPECT_EQ(post({}, "application/x-www-form-urlencoded"), 415);
  EXPECT_EQ(s.get("/health").first, 200);
}

// With a key, a request without it is answered 401 from its headers: the
// body it announces is never waited for.
TEST(ServerHardening, ApiKeyIsCheckedBeforeTheBody) {
  server::ServerOptions o;
  o.api_keys = {"k3y"};
  LiveServer s(o);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(s.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 500000\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  char buf[512] = {};
  const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  ASSERT_GT(n, 0) << "no answer within 5 s: the server waited for the body";
  EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 401", 0), 0u) << buf;
}

}  // namespace
}  // namespace strata::server_hardening_test

namespace strata::server_hardening_test {
namespace {

// The transport's bounds (docs/security.md), on a live server over raw
// sockets. The cpp-httplib server transport these replaced failed the first
// five (the issue's "before", measured in docs/security.md); it is removed.
server::ServerOptions beast_options() { return server::ServerOptions{}; }

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `head`, then `body_bytes` produced by `piece` (a buffer sent over and
// over), stopping as soon as the server answers; returns what it answered
// (up to the close or `deadline_s`) and how many bytes were sent.
struct Exchange {
  std::string answer;
  size_t sent = 0;
};
Exchange exchange(int port, const std::string& head, const std::string& piece, size_t body_bytes,
                  const std::string& tail = "", double deadline_s = 20) {
  Exchange x;
  const int fd = connect_to(port);
  if (fd < 0) return x;
  std::string out = head;
  size_t off = 0, body_left = body_bytes;
  bool tail_sent = tail.empty();
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  char buf[4096];
  bool reading_only = false;
  while (std::chrono::steady_clock::now() < until) {
    if (off == out.size() && !reading_only) {
      if (body_left > 0) {
        out = piece.substr(0, std::min(piece.size(), body_left));
        body_left -= out.size();
        off = 0;
      } else if (!tail_sent) {
        out = tail;
        off = 0;
        tail_sent = true;
      } else {
        reading_only = true;
      }
    }
    pollfd p{fd, static_cast<short>(POLLIN | (reading_only ? 0 : POLLOUT)), 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      x.answer.append(buf, static_cast<size_t>(n));
      reading_only = true;
      continue;
    }
    if (p.revents & POLLOUT) {
      const ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN) reading_only = true;
      if (n > 0) off += static_cast<size_t>(n), x.sent += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return x;
}

int status_of(const std::string& answer) {
  if (answer.rfind("HTTP/1.", 0) != 0 || answer.size() < 12) return 0;
  return std::atoi(answer.c_str() + 9);
}

// How much a bounded request may grow the server's peak RSS (KiB). Under
// AddressSanitizer the shadow memory and the quarantine of freed blocks
// count too (measured 2.1-2.3 MiB for the header test): the bound there is
// 8 MiB, still well under what an unbounded transport reached (+16-20 MiB).
#if defined(__SANITIZE_ADDRESS__)
constexpr long kRssGrowthKb = 8192;
#else
constexpr long kRssGrowthKb = 2048;
#endif

// The process's peak RSS since reset_peak_rss() (Linux: clear_refs 5).
void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}
long rss_kb(const char* field) {  // "VmHWM:" or "VmRSS:"
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, std::strlen(field)) == 0) kb = std::atol(line + std::strlen(field));
  std::fclose(f);
  return kb;
}

// The error body's OpenAI shape: {"error":{"message","type","code",...}}.
void expect_openai_error(const std::string& answer, int status) {
  EXPECT_EQ(status_of(answer), status) << answer.substr(0, 300);
  const size_t b = answer.find("\r\n\r\n");
  ASSERT_NE(b, std::string::npos) << answer.substr(0, 300);
  const Json j = Json::parse(answer.substr(b + 4), nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << answer.substr(0, 300);
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
}

const std::string kChunkedHead =
    "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

std::string chunk_of(size_t n) { return fmt::format("{:x}\r\n", n) + std::string(n, ' ') + "\r\n"; }

// An 8 MiB chunked body against a 4 KiB cap: 413 while reading, and the
// server's memory never holds the body (peak RSS grows < 2 MiB).
TEST(ServerTransport, ChunkedBodyOverTheCapIs413WhileReading) {
  server::ServerOptions o = beast_options();
  o.max_body = 4096;
  LiveServer s(o);
  ASSERT_EQ(s.get("/health").first, 200);
  const std::string piece = chunk_of(64 << 10);
  reset_peak_rss();
  const long before = rss_kb("VmRSS:");
  const Exchange x = exchange(s.port(), kChunkedHead, piece, size_t{8} << 20, "0\r\n\r\n");
  const long peak = rss_kb("VmHWM:");
  expect_openai_error(x.answer, 413);
  EXPECT_LT(peak - before, kRssGrowthKb) << "peak RSS grew " << peak - before << " KiB";
  // A chunked body within the cap is read and answered.
  const std::string ok = R"({"prompt":"hi","max_tokens":1})";
  std::string head = kChunkedHead;
  head.insert(head.size() - 2, "Connection: close\r\n");
  const Exchange y = exchange(s.port(), head + fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", ok.size(), ok), "", 0);
  EXPECT_EQ(status_of(y.answer), 200) << y.answer.substr(0, 300);
  EXPECT_EQ(s.get("/health").first, 200);
}

// A compressed body could inflate far past the cap: refused from the
// headers (415), whatever the encoding.
TEST(ServerTransport, CompressedBodiesAreRefused) {
  LiveServer s(beast_options());
  for (const char* enc : {"gzip", "br", "deflate"}) {
    const std::string head = fmt::format(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Encoding: {}\r\nContent-Length: 64\r\n\r\n",
        enc);
    const Exchange x = exchange(s.port(), head, std::string(64, '\x1f'), 64);
    expect_openai_error(x.answer, 415);
  }
  EXPECT_EQ(s.get("/health").first, 200);
}

// One 1 MiB header line, and 100,000 short headers: 431 while reading, the
// server's memory bounded.
TEST(ServerTransport, OversizedHeadersAre431) {
  LiveServer s(beast_options());
  ASSERT_EQ(s.get("/health").first, 200);
  reset_peak_rss();
  const long before = rss_kb("VmRSS:");
  const Exchange line =
      exchange(s.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ", std::string(64 << 10, 'a'),
               size_t{1} << 20, "\r\n\r\n");
  std::string many;
  for (int i = 0; i < 1000; ++i) many += fmt::format("X-H{}: v\r\n", i % 10);
  const Exchange headers = exchange(s.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", many,
                                    many.size() * 100, "\r\n");
  const long peak = rss_kb("VmHWM:");
  expect_openai_error(line.answer, 431);
  expect_openai_error(headers.answer, 431);
  EXPECT_LT(peak - before, kRssGrowthKb) << "peak RSS grew " << peak - before << " KiB";
  EXPECT_EQ(s.get("/health").first, 200);
}

// parallel + queue + 8 connections trickling their headers take no thread:
// /health still answers at once (cpp-httplib: not until its 30 s read
// timeout frees a worker). The 5 s bound is far from both.
TEST(ServerTransport, SlowSocketsDoNotStarveHealth) {
  server::ServerOptions o = beast_options();
  o.sched.parallel = 2;
  o.sched.queue = 2;
  LiveServer s(o);
  std::vector<int> slow;
  for (int i = 0; i < o.sched.parallel + o.sched.queue + 8; ++i) {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    const std::string part = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    ASSERT_EQ(::send(fd, part.data(), part.size(), MSG_NOSIGNAL), static_cast<ssize_t>(part.size()));
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // every one accepted and read
  const auto t0 = std::chrono::steady_clock::now();
  const Exchange h = exchange(s.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", "", 0,
                              "", 5);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int fd : slow) ::close(fd);
  EXPECT_EQ(status_of(h.answer), 200) << "no /health answer in " << secs << " s";
}

// One deadline for a whole request, not per read: a client that sends a byte
// every 200 ms is answered 408 once --read-timeout (1 s) has passed.
TEST(ServerTransport, TrickledRequestGets408) {
  server::ServerOptions o = beast_options();
  o.read_timeout_s = 1;
  LiveServer s(o);
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
  std::string answer;
  for (size_t i = 0; i < req.size() && answer.empty(); ++i) {
    if (::send(fd, &req[i], 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) answer.assign(buf, static_cast<size_t>(n));
      break;
    }
  }
  ::close(fd);
  expect_openai_error(answer, 408);
}

// Beyond --max-connections a connection is answered 503 (and closed), the
// open ones unaffected.
TEST(ServerTransport, ConnectionLimitIs503) {
  server::ServerOptions o = beast_options();
  o.max_connections = 4;
  LiveServer s(o);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_to(s.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const Exchange x = exchange(s.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "", 0, "", 5);
  expect_openai_error(x.answer, 503);
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(s.get("/health").first, 200);
}

// Keep-alive: several requests on one connection, a stream among them.
TEST(ServerTransport, KeepAliveAndStreaming) {
  LiveServer s(beast_options());
  httplib::Client c("127.0.0.1", s.port());
  c.set_keep_alive(true);
  c.set_read_timeout(60, 0);
  for (int i = 0; i < 3; ++i) {
    auto r = c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2,"stream":true})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    const auto ev = sse_events(r->body);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back(), "[DONE]");
    auto h = c.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }
}

}  // namespace
}  // namespace strata::server_hardening_test
