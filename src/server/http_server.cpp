#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "core/json.h"
#include "runtime/stats.h"
#include "server/glm_output.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/stats_history.h"
#include "text/json_call_constraint.h"
#include "text/tool_constraint.h"

namespace strata::server {

namespace {

void send_error(HttpResponse& res, const ApiError& e) {
  res.status = e.status;
  res.content_type = "application/json";
  res.stream = nullptr;
  // Messages may quote the client's (invalid) bytes.
  res.body = dump_reply(error_json(e));
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Constant time in the contents (the length of the expected key may leak).
bool same_key(std::string_view got, std::string_view want) {
  unsigned char diff = got.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    const unsigned char g = i < got.size() ? static_cast<unsigned char>(got[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(want[i]));
  }
  return diff == 0;
}

// One endpoint's side of an SSE stream: what its chunks hold. Everything
// else (framing, the finish chunk, usage, errors, [DONE], cancelling the job
// when the client goes away) is Server::Impl::stream's. Each chunk carries
// one choice whose `body_key` is the endpoint's; a piece of output is sent
// when its body says something (differs from `empty_body`) or it has logprobs.
struct StreamSide {
  const char* object = nullptr;    // the chunks' "object"
  const char* body_key = nullptr;  // "delta" (chat) or "text" (completions)
  Json empty_body;                 // a body that says nothing: {} or ""; also the finish chunk's
  Json opening = nullptr;  // the body sent before any output (chat: the role); null: none
  std::function<Json(const std::string& text)> piece;
  std::function<Json(std::string& finish)> closing;  // the body before the finish chunk (may change it); null: none
  std::function<Json(const std::vector<TokenLogprob>&)> logprobs;  // null: not requested
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
};

// Writes SSE events until the client is gone.
class SseWriter {
 public:
  explicit SseWriter(const std::function<bool(std::string_view)>& write) : write_(write) {}
  void event(const std::string& data) {
    if (!ok_) return;
    ok_ = write_("data: " + data + "\n\n");
  }
  bool ok() const { return ok_; }

 private:
  const std::function<bool(std::string_view)>& write_;
  bool ok_ = true;
};

// The host part of a Host header value or of an Origin's authority:
// "name:port" -> "name", "[::1]:port" -> "::1", lower case.
std::string host_part(std::string_view v) {
  std::string h;
  if (!v.empty() && v[0] == '[') {
    const size_t e = v.find(']');
    h = std::string(v.substr(1, e == std::string_view::npos ? std::string_view::npos : e - 1));
  } else {
    h = std::string(v.substr(0, v.find(':')));
  }
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return h;
}

bool ip_literal(const std::string& h) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, h.c_str(), buf) == 1 || ::inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequal(k, name)) return v;
  return "";
}
bool HttpRequest::has_header(std::string_view name) const {
  for (const auto& h : headers)
    if (iequal(h.first, name)) return true;
  return false;
}

// A web page can send requests to a server it cannot read from; with DNS
// rebinding it can read too, under its own name. So a request naming a host
// (Host, Origin) that is neither an address, localhost, --host nor an
// --allow-host name is refused, and so is an Origin of "null".
bool host_allowed(const ServerOptions& o, std::string_view host_header, std::string_view origin) {
  if (std::find(o.allowed_hosts.begin(), o.allowed_hosts.end(), "*") != o.allowed_hosts.end()) return true;
  auto ok = [&](const std::string& h) {
    if (h == "localhost" || ip_literal(h) || h == host_part(o.host)) return true;
    for (const std::string& a : o.allowed_hosts)
      if (h == host_part(a)) return true;
    return false;
  };
  if (!host_header.empty() && !ok(host_part(host_header))) return false;
  if (!origin.empty()) {
    const size_t s = origin.find("://");
    if (s == std::string_view::npos) return false;  // "null" (a sandboxed or file:// page) and junk
    std::string_view auth = origin.substr(s + 3);
    auth = auth.substr(0, auth.find('/'));
    if (!ok(host_part(auth))) return false;
  }
  return true;
}

// Why host:port cannot be listened on (http_transport.h).
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


struct Server::Impl final : HttpHandler {
  ServerModel m;
  ChatTemplate tmpl;
  GenerationConfig gen;
  ServerOptions o;
  Scheduler sched;
  IdSource ids;
  std::atomic<uint64_t> busy_early{0};  // 429s answered before parsing (sched.full())
  int bound_port = -1;
  // stop() may come before run() (a signal while binding): run() then
  // returns at once; a stop() that races run()'s start is the transport's.
  std::mutex run_mu;
  bool stopped = false, running = false;
  const uint64_t start_ns = now_ns();

  // The request log (request_log.h): when each request began and the job it
  // made, keyed by the transport's request key (alive until done()).
  struct Live {
    uint64_t start_ns = 0;
    std::shared_ptr<Job> job;
  };
  RequestLog log{o.log_format};
  std::mutex live_mu;
  std::unordered_map<const void*, Live> live;

  void begin_request(const HttpRequest& req) {
    std::lock_guard l(live_mu);
    live[req.key] = Live{now_ns(), nullptr};
  }
  void track(const HttpRequest& req, const std::shared_ptr<Job>& job) {
    std::lock_guard l(live_mu);
    live[req.key].job = job;
  }
  // The transport calls it once the response is written (a stream's last chunk included).
  void done(const HttpRequest& req, int status) override {
    Live done;
    {
      std::lock_guard l(live_mu);
      if (auto it = live.find(req.key); it != live.end()) {
        done = std::move(it->second);
        live.erase(it);
      }
    }
    RequestRecord r;
    r.method = req.method;
    r.path = req.path;
    r.status = status;
    r.client = req.remote_addr;
    if (done.job) {
      std::lock_guard l(done.job->mu);
      r.prompt_tokens = done.job->prompt_tokens;
      r.cached_tokens = done.job->cached_tokens;
      r.completion_tokens = done.job->completion_tokens;
      if (done.job->finish != Finish::None) r.finish = finish_name(done.job->finish);
    }
    if (done.start_ns) r.ms = static_cast<double>(now_ns() - done.start_ns) / 1e6;
    log.write(r);
  }

  // The history /v1/stats/history serves (stats_history.h): a thread adds
  // the scheduler's counters once per interval, whatever the transport; the
  // generation step never sees it.
  StatsHistory history{o.history_points, o.history_interval_s};
  std::mutex history_mu;
  std::condition_variable history_cv;
  bool history_stop = false;
  std::thread sampler;

  void sample() {
    const SchedulerStats st = sched.stats();
    HistorySample h;
    h.t = static_cast<double>(now_ns() - start_ns) / 1e9;
    h.generated_tokens = st.generated_tokens;
    h.prefilled_tokens = st.prefilled_tokens;
    h.expert_requests = st.engine.experts.requests;
    h.expert_hits = st.engine.experts.hits;
    h.expert_bytes_read = st.engine.experts.bytes_read;
    std::lock_guard l(history_mu);
    history.add(h);
  }
  void sample_loop() {
    const auto period = std::chrono::nanoseconds(static_cast<int64_t>(o.history_interval_s * 1e9));
    auto next = std::chrono::steady_clock::now();
    std::unique_lock l(history_mu);
    while (!history_stop) {
      next += period;
      if (history_cv.wait_until(l, next, [&] { return history_stop; })) break;
      l.unlock();
      sample();
      l.lock();
    }
  }
  void stop_sampler() {
    {
      std::lock_guard l(history_mu);
      history_stop = true;
    }
    history_cv.notify_all();
    if (sampler.joinable()) sampler.join();
  }

  Impl(const ServerModel& m_, const ChatTemplate& t, const GenerationConfig& g, const ServerOptions& o_)
      : m(m_), tmpl(t), gen(g), o(o_), sched(m_, o_.sched) {
    sample();  // the history starts at start-up
    TransportOptions to;
    to.host = o.host;
    to.port = o.port;
    to.max_body = o.max_body;
    to.max_header_bytes = o.max_header_bytes;
    to.read_timeout_s = o.read_timeout_s;
    to.max_connections = o.max_connections;
    to.handler_threads = o.sched.parallel + o.sched.queue + 8;
    transport = make_beast_transport(*this, to);
    sampler = std::thread([this] { sample_loop(); });  // last: nothing after it throws
  }
  ~Impl() override { stop_sampler(); }


  int64_t ctx() const { return o.sched.ctx; }

  // The index of the request's key in o.api_keys; -1: none matches. Every
  // key is compared (constant time in their contents).
  int key_index(const HttpRequest& req) const {
    const std::string h = req.header("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (h.size() < kBearer.size() || h.compare(0, kBearer.size(), kBearer) != 0) return -1;
    const std::string_view got = std::string_view(h).substr(kBearer.size());
    int hit = -1;
    for (size_t i = 0; i < o.api_keys.size(); ++i)
      if (same_key(got, o.api_keys[i])) hit = static_cast<int>(i);
    return hit;
  }
  bool authorized(const HttpRequest& req) const { return o.api_keys.empty() || key_index(req) >= 0; }
  // The prefix-reuse scope of an authorized request: its key's
  // (key_scope), 0 on a keyless server (one namespace for every client).
  const std::vector<uint64_t> scopes = [this] {
    std::vector<uint64_t> s;
    for (const std::string& k : o.api_keys) s.push_back(key_scope(k));
    return s;
  }();
  uint64_t scope_of(const HttpRequest& req) const {
    const int i = o.api_keys.empty() ? -1 : key_index(req);
    return i < 0 ? 0 : scopes[static_cast<size_t>(i)];
  }

  // Tokens -> a Job with the limits applied.
  std::shared_ptr<Job> make_job(std::vector<int32_t> prompt, const CommonRequest& c, const HttpRequest& req) const {
    if (prompt.empty()) bad("prompt", "the prompt is empty");
    if (static_cast<int64_t>(prompt.size()) >= ctx())
      bad("messages", fmt::format("the prompt is {} tokens and the context is {}", prompt.size(), ctx()),
          "context_length_exceeded");
    auto job = std::make_shared<Job>();
    const int64_t room = ctx() - static_cast<int64_t>(prompt.size());
    job->max_tokens = std::min({c.max_tokens < 0 ? o.max_tokens_ceiling : c.max_tokens, o.max_tokens_ceiling, room});
    job->max_tokens = std::max<int64_t>(1, job->max_tokens);
    job->prompt = std::move(prompt);
    job->sampling = c.sampling;
    job->stop = c.stop;
    job->top_logprobs = c.top_logprobs;
    job->ignore_eos = c.ignore_eos;
    if (c.json) job->constraint = std::make_shared<JsonConstraint>(c.json, json_vocab());
    job->deadline_ns = o.timeout_s > 0 ? now_ns() + static_cast<uint64_t>(o.timeout_s * 1e9) : 0;
    job->scope = scope_of(req);
    return job;
  }

  // Token bytes and trie for response_format, built on first use, shared.
  mutable std::mutex json_vocab_mu;
  mutable std::shared_ptr<const JsonVocab> json_vocab_;
  std::shared_ptr<const JsonVocab> json_vocab(const char* param = "response_format") const {
    std::lock_guard l(json_vocab_mu);
    if (!json_vocab_) {
      try {
        json_vocab_ = JsonVocab::build(*m.tok, m.engine->config().vocab_size);
      } catch (const Error& e) {
        bad(param, e.what());
      }
    }
    return json_vocab_;
  }

  static ApiError busy() {
    return ApiError{429, "the server is busy (queue full); retry later", "", "rate_limit_error", "queue_full"};
  }
  void submit(const std::shared_ptr<Job>& job) {
    if (!sched.submit(job)) throw busy();
  }

  // Waits for the end of a non-streamed job; returns its text.
  std::string wait(Job& job, std::vector<TokenLogprob>& lps) {
    std::string text;
    while (!job.take(text, lps, 200)) {
    }
    if (job.finish == Finish::Timeout)
      throw ApiError{504, "the request timed out", "", "timeout_error", "timeout"};
    if (job.finish == Finish::Cancelled) throw ApiError{503, "the request was cancelled: " + job.error, "", "server_error", ""};
    if (job.finish == Finish::Error) throw ApiError{500, "generation failed: " + job.error, "", "server_error", ""};
    return text;
  }

  // A whole (non-streamed) answer: one choice and the usage.
  void reply(HttpResponse& res, const Job& job, const char* object, const std::string& id, Json choice) const {
    Json r = response_base(object, id, o.model_id);
    r["choices"] = Json::array({std::move(choice)});
    r["usage"] = usage_json(job);
    res.body = dump_reply(r);
  }

  // Streams a job as SSE, each chunk shaped by `side`.
  void stream(HttpResponse& res, std::shared_ptr<Job> job, const std::string& id, StreamSide side) {
    auto s = std::make_shared<const StreamSide>(std::move(side));
    res.content_type = "text/event-stream";
    res.stream = [this, job, id, s](const std::function<bool(std::string_view)>& write) {
      SseWriter out(write);
      auto send = [&](Json body, Json logprobs, Json finish) {
        Json ch = response_base(s->object, id, o.model_id);
        ch["choices"] = Json::array({choice_json(s->body_key, std::move(body), std::move(logprobs), std::move(finish))});
        out.event(dump_reply(ch));
      };
      if (!s->opening.is_null()) send(s->opening, nullptr, nullptr);
      bool done = false;
      while (out.ok() && !done) {
        std::string text;
        std::vector<TokenLogprob> lps;
        done = job->take(text, lps, 200);
        if (text.empty() && lps.empty()) continue;
        Json body = s->piece(text);
        if (body != s->empty_body || (s->logprobs && !lps.empty()))
          send(std::move(body), s->logprobs ? s->logprobs(lps) : Json(nullptr), nullptr);
      }
      if (!out.ok()) {
        job->cancel = true;
        return false;
      }
      if (job->finish == Finish::Stop || job->finish == Finish::Length) {
        std::string finish = finish_name(job->finish);
        if (s->closing)
          if (Json body = s->closing(finish); body != s->empty_body) send(std::move(body), nullptr, nullptr);
        send(s->empty_body, nullptr, finish);
        if (s->include_usage) {
          Json u = response_base(s->object, id, o.model_id);
          u["choices"] = Json::array();
          u["usage"] = usage_json(*job);
          out.event(dump_reply(u));
        }
      } else {
        const ApiError e = job->finish == Finish::Timeout
                               ? ApiError{504, "the request timed out", "", "timeout_error", "timeout"}
                               : ApiError{500, "generation failed: " + job->error, "", "server_error", ""};
        out.event(dump_reply(error_json(e)));
      }
      out.event("[DONE]");
      return out.ok();
    };
  }

  void chat(const HttpRequest& req, HttpResponse& res) {
    // Refused before the work of parsing and tokenizing: clients retrying at
    // once cannot take the CPU from generation.
    if (sched.full()) {
      ++busy_early;
      throw busy();
    }
    const Json j = parse_request_body(req.body, o.max_body);
    ChatRequest r = parse_chat_request(j, req.body, gen, tmpl.dialect, o.think);
    std::string prompt_text;
    try {
      prompt_text = tmpl.render(r.messages, r.tools, r.render);
    } catch (const Error& e) {
      bad("messages", e.what());
    }
    const bool raw = tmpl.dialect == ChatDialect::Raw;
    auto job = make_job(m.tok->encode(prompt_text, /*add_special=*/raw), r.common, req);
    if (r.tool_grammar)
      job->constraint = std::make_shared<ToolCallConstraint>(r.tool_grammar, json_vocab("tool_choice"), tool_markup_ids(*m.tok));
    if (r.json_call_grammar)
      job->constraint = std::make_shared<JsonCallConstraint>(
          r.json_call_grammar, json_vocab("tool_choice"), json_call_markup(tmpl.dialect),
          [this](std::string_view s) { return m.tok->encode(s, /*add_special=*/false); });
    // Constrained JSON output is the answer as generated: not split by the template's parser.
    ChatOutput output{tmpl.dialect != ChatDialect::Raw && !r.common.json, tmpl.opens_reasoning(r.render), std::move(r.tools),
                      tmpl.dialect};
    const bool want_lp = r.common.top_logprobs >= 0;
    submit(job);
    track(req, job);
    const std::string id = ids.next("chatcmpl");
    if (!r.common.stream) {
      std::vector<TokenLogprob> lps;
      const std::string text = wait(*job, lps);
      std::string finish = finish_name(job->finish);
      Json msg = chat_message(output, text, ids, finish);
      reply(res, *job, "chat.completion", id,
            choice_json("message", std::move(msg), want_lp ? chat_logprobs(*m.tok, lps) : Json(nullptr), finish));
      return;
    }
    auto deltas = std::make_shared<ChatDeltaStream>(std::move(output));
    StreamSide side;
    side.object = "chat.completion.chunk";
    side.body_key = "delta";
    side.empty_body = Json::object();
    side.opening = Json{{"role", "assistant"}, {"content", ""}};
    side.piece = [deltas](const std::string& text) { return deltas->next(text); };
    side.closing = [this, deltas](std::string& finish) { return deltas->last(ids, finish); };
    if (want_lp) side.logprobs = [this](const std::vector<TokenLogprob>& lps) { return chat_logprobs(*m.tok, lps); };
    side.include_usage = r.common.include_usage;
    stream(res, job, id, std::move(side));
  }

  void completions(const HttpRequest& req, HttpResponse& res) {
    // Refused before the work of parsing and tokenizing: clients retrying at
    // once cannot take the CPU from generation.
    if (sched.full()) {
      ++busy_early;
      throw busy();
    }
    const Json j = parse_request_body(req.body, o.max_body);
    CompletionRequest r = parse_completion_request(j, req.body, gen, *m.tok, m.engine->config().vocab_size);
    auto job = make_job(std::move(r.prompt), r.common, req);
    const bool want_lp = r.common.top_logprobs >= 0;
    submit(job);
    track(req, job);
    const std::string id = ids.next("cmpl");
    if (!r.common.stream) {
      std::vector<TokenLogprob> lps;
      const std::string text = wait(*job, lps);
      reply(res, *job, "text_completion", id,
            choice_json("text", text, want_lp ? completion_logprobs(*m.tok, lps) : Json(nullptr), finish_name(job->finish)));
      return;
    }
    StreamSide side;
    side.object = "text_completion";
    side.body_key = "text";
    side.empty_body = "";
    side.piece = [](const std::string& text) { return Json(text); };
    if (want_lp) side.logprobs = [this](const std::vector<TokenLogprob>& lps) { return completion_logprobs(*m.tok, lps); };
    side.include_usage = r.common.include_usage;
    stream(res, job, id, std::move(side));
  }

  Json stats_now() const {
    const StatsContext c{o.model_id, static_cast<double>(now_ns() - start_ns) / 1e9, &o.sched, &m.engine->config(),
                         m.kv != nullptr, m.engine->speculator().uses_mtp(), m.engine->options().forward.kv};
    SchedulerStats st = sched.stats();
    st.rejected += busy_early.load();  // 429s answered before parsing count as the scheduler's
    st.engine.peak_rss_bytes = peak_rss_bytes();  // now (the snapshot is the last step's)
    return stats_json(st, c);
  }

  static ApiError not_found() { return ApiError{404, "no such endpoint", "", "invalid_request_error", "not_found"}; }

  // Everything here is decided from the headers, before a body is read.
  std::optional<HttpResponse> check(const HttpRequest& req) override {
    begin_request(req);
    HttpResponse res;
    auto refuse = [&](const ApiError& e) {
      send_error(res, e);
      return std::optional<HttpResponse>(std::move(res));
    };
    if (!host_allowed(o, req.header("Host"), req.header("Origin")))
      return refuse(ApiError{403,
                             "this Host or Origin is not one the server answers to (start it with --allow-host "
                             "NAME to add a name clients use)",
                             "", "invalid_request_error", "host_not_allowed"});
    if (req.path != "/health" && req.path != "/" && !authorized(req))
      return refuse(ApiError{401, "invalid or missing API key (Authorization: Bearer ...)", "", "invalid_request_error",
                             "invalid_api_key"});
    if (req.method == "POST") {
      // A page may POST text/plain anywhere without asking; JSON it may not.
      std::string ct = req.header("Content-Type");
      ct = ct.substr(0, ct.find(';'));
      std::transform(ct.begin(), ct.end(), ct.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      while (!ct.empty() && ct.back() == ' ') ct.pop_back();
      if (ct != "application/json")
        return refuse(ApiError{415, "the body must be JSON (Content-Type: application/json)", "",
                               "invalid_request_error", "unsupported_media_type"});
    }
    // A compressed body could inflate far past the cap: never accepted.
    if (const std::string ce = req.header("Content-Encoding"); !ce.empty() && !iequal(ce, "identity"))
      return refuse(ApiError{415, fmt::format("Content-Encoding '{}' is not accepted: send the body uncompressed", ce),
                             "", "invalid_request_error", "unsupported_content_encoding"});
    if (req.has_header("Content-Length")) {
      const std::string v = req.header("Content-Length");
      if (v.size() > 18 || std::strtoull(v.c_str(), nullptr, 10) > o.max_body)
        return refuse(ApiError{413, "the request body is too large", "", "invalid_request_error", "request_too_large"});
    }
    return std::nullopt;
  }

  void handle(const HttpRequest& req, HttpResponse& res) override {
    // The route table: method and path -> the member that answers. A GET
    // never blocks; a POST waits for generation.
    using Route = void (Impl::*)(const HttpRequest&, HttpResponse&);
    struct RouteEntry {
      const char* method;
      const char* path;
      Route f;
      bool open;  // answered without the API key
    };
    static constexpr RouteEntry kRoutes[] = {
        {"GET", "/health", &Impl::health, true},         {"GET", "/", &Impl::dashboard, true},
        {"GET", "/v1/models", &Impl::models, false},     {"GET", "/v1/stats", &Impl::stats, false},
        {"GET", "/v1/stats/history", &Impl::stats_history, false},
        {"GET", "/metrics", &Impl::prom, false},         {"POST", "/v1/chat/completions", &Impl::chat, false},
        {"POST", "/v1/completions", &Impl::completions, false},
    };

    try {
      const RouteEntry* hit = nullptr;
      bool path_known = false;
      for (const RouteEntry& r : kRoutes) {
        if (req.path != r.path) continue;
        path_known = true;
        if (req.method == r.method || (req.method == "HEAD" && std::string_view(r.method) == "GET")) hit = &r;
      }
      if (!hit) {
        if (path_known) throw ApiError{405, "method not allowed", "", "invalid_request_error", "method_not_allowed"};
        throw not_found();
      }
      if (!hit->open && !authorized(req))
        throw ApiError{401, "invalid or missing API key (Authorization: Bearer ...)", "", "invalid_request_error",
                       "invalid_api_key"};
      (this->*(hit->f))(req, res);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::bad_alloc&) {
      send_error(res, ApiError{500, "out of memory", "", "server_error", ""});
    } catch (const std::exception& e) {
      send_error(res, ApiError{500, e.what(), "", "server_error", ""});
    }
  }

  void health(const HttpRequest&, HttpResponse& res) { res.body = R"({"status":"ok"})"; }
  void dashboard(const HttpRequest&, HttpResponse& res) {
    res.content_type = "text/html; charset=utf-8";
    res.body = kDashboardHtml;
  }
  void models(const HttpRequest&, HttpResponse& res) {
    Json d{{"id", o.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "strata"}};
    res.body = dump_reply(Json{{"object", "list"}, {"data", Json::array({d})}});
  }
  void stats(const HttpRequest&, HttpResponse& res) {
    Json j = stats_now();
    j["recent_requests"] = log.recent();
    res.body = dump_reply(j);
  }
  void stats_history(const HttpRequest&, HttpResponse& res) {
    Json j;
    {
      std::lock_guard l(history_mu);
      j = history.json();
    }
    j["uptime_s"] = static_cast<double>(now_ns() - start_ns) / 1e9;
    res.body = dump_reply(j);
  }
  void prom(const HttpRequest&, HttpResponse& res) {
    res.content_type = "text/plain; version=0.0.4";
    res.body = prometheus_metrics(stats_now());
  }

  // Declared last: destroyed first (its threads call back into the above).
  std::unique_ptr<Transport> transport;
};

Server::Server(const ServerModel& m, const ChatTemplate& tmpl, const GenerationConfig& gen, const ServerOptions& o)
    : impl_(std::make_unique<Impl>(m, tmpl, gen, o)) {}
Server::~Server() {
  stop();
}

int Server::bind() {
  impl_->bound_port = impl_->transport->bind();
  return impl_->bound_port;
}
void Server::run() {
  Impl& i = *impl_;
  {
    std::lock_guard l(i.run_mu);
    if (i.stopped) return;
    i.running = true;
  }
  i.transport->run();
}
void Server::stop() {
  if (!impl_) return;
  Impl& i = *impl_;
  bool running = false;
  {
    std::lock_guard l(i.run_mu);
    i.stopped = true;
    running = i.running;
  }
  i.stop_sampler();
  i.sched.shutdown();  // in-flight requests end (cancelled) so handler threads can finish
  i.transport->stop(running);
}
int Server::port() const { return impl_->bound_port; }

}  // namespace strata::server
