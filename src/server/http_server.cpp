#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <random>

#include "core/clock.h"
#include "runtime/stats.h"
#include "text/tool_constraint.h"
#include "core/error.h"
#include "core/json.h"

namespace strata::server {

namespace {

// A request the client got wrong (or one the server refuses): OpenAI's
// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // empty: null
  std::string type = "invalid_request_error";
  std::string code;   // empty: null
};

[[noreturn]] void bad(std::string param, std::string message, std::string code = {}) {
  throw ApiError{400, std::move(message), std::move(param), "invalid_request_error", std::move(code)};
}

Json error_json(const ApiError& e) {
  Json err;
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = e.code.empty() ? Json(nullptr) : Json(e.code);
  return Json{{"error", err}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  // Messages may quote the client's (invalid) bytes.
  res.set_content(error_json(e).dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
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

// Typed field readers: absent or null -> nullopt; a wrong type -> 400.
const Json* field(const Json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}
std::optional<double> get_number(const Json& j, const char* name, double lo, double hi) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name), "invalid_type");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  return d;
}
std::optional<int64_t> get_int(const Json& j, const char* name, int64_t lo, int64_t hi) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() && !v->is_number_unsigned())
    bad(name, fmt::format("'{}' must be an integer", name), "invalid_type");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    if (hi == INT64_MAX) return INT64_MAX;
    bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  return x;
}
std::optional<bool> get_bool(const Json& j, const char* name) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name), "invalid_type");
  return v->get<bool>();
}
std::optional<std::string> get_string(const Json& j, const char* name) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(name, fmt::format("'{}' must be a string", name), "invalid_type");
  return v->get<std::string>();
}

// What both endpoints share, parsed and validated.
struct Common {
  int64_t max_tokens = -1;  // -1: the ceiling
  SamplerOptions sampling;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, ignore_eos = false;
  int top_logprobs = -1;
  std::shared_ptr<const JsonGrammar> json;  // response_format json_object / json_schema
};

// response_format: {"type": "text"} | {"type": "json_object"} |
// {"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}}.
// `body`: the request text, parsed again keeping key order (properties are
// generated in schema order).
std::shared_ptr<const JsonGrammar> parse_response_format(const Json& rf, std::string_view body) {
  if (!rf.is_object()) bad("response_format", "'response_format' must be an object", "invalid_type");
  const Json* tv = field(rf, "type");
  if (!tv) bad("response_format.type", "'response_format.type' is required", "missing_required_parameter");
  if (!tv->is_string()) bad("response_format.type", "'response_format.type' must be a string", "invalid_type");
  const std::string t = tv->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return JsonGrammar::any_object();
  if (t != "json_schema")
    bad("response_format.type", "'response_format.type' must be 'text', 'json_object' or 'json_schema'",
        "invalid_value");
  const Json* js = field(rf, "json_schema");
  if (!js) bad("response_format.json_schema", "'response_format.json_schema' is required", "missing_required_parameter");
  if (!js->is_object()) bad("response_format.json_schema", "'response_format.json_schema' must be an object", "invalid_type");
  if (const Json* n = field(*js, "name")) {
    if (!n->is_string()) bad("response_format.json_schema.name", "'response_format.json_schema.name' must be a string", "invalid_type");
    const std::string name = n->get<std::string>();
    const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
    if (!ok) bad("response_format.json_schema.name", "'response_format.json_schema.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -");
  }
  if (const Json* d = field(*js, "description"); d && !d->is_string())
    bad("response_format.json_schema.description", "'response_format.json_schema.description' must be a string", "invalid_type");
  if (const Json* st = field(*js, "strict"); st && !st->is_boolean())
    bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean", "invalid_type");
  const Json* sc = field(*js, "schema");
  if (!sc) bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required", "missing_required_parameter");
  if (!sc->is_object())
    bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object", "invalid_type");
  try {
    const nlohmann::ordered_json req = nlohmann::ordered_json::parse(body);
    return JsonGrammar::from_schema(req.at("response_format").at("json_schema").at("schema"));
  } catch (const Error& e) {
    bad("response_format.json_schema.schema", e.what(), "unsupported_schema");
  } catch (const std::exception& e) {
    bad("response_format.json_schema.schema", e.what(), "invalid_value");
  }
}

Common parse_common(const Json& j, const GenerationConfig& gen, bool chat, std::string_view body) {
  Common c;
  if (auto m = get_string(j, "model")) (void)m;
  if (auto n = get_int(j, "n", INT64_MIN, INT64_MAX); n && *n != 1)
    bad("n", "only n = 1 is supported");
  if (auto bo = get_int(j, "best_of", INT64_MIN, INT64_MAX); bo && *bo != 1) bad("best_of", "only best_of = 1 is supported");
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (auto v = get_int(j, k, 1, INT64_MAX)) c.max_tokens = *v;
  const bool greedy_default = gen.do_sample.has_value() && !*gen.do_sample;
  c.sampling.temperature = get_number(j, "temperature", 0.0, 2.0).value_or(greedy_default ? 0.0 : gen.temperature.value_or(1.0));
  c.sampling.top_p = get_number(j, "top_p", 0.0, 1.0).value_or(gen.top_p.value_or(1.0));
  if (c.sampling.top_p <= 0.0) bad("top_p", "'top_p' must be greater than 0");
  const int64_t top_k = get_int(j, "top_k", -1, INT32_MAX).value_or(gen.top_k.value_or(0));
  c.sampling.top_k = top_k < 0 ? 0 : top_k;
  c.sampling.min_p = get_number(j, "min_p", 0.0, 1.0).value_or(gen.min_p.value_or(0.0));
  c.sampling.presence_penalty = get_number(j, "presence_penalty", -2.0, 2.0).value_or(0.0);
  c.sampling.frequency_penalty = get_number(j, "frequency_penalty", -2.0, 2.0).value_or(0.0);
  c.sampling.repetition_penalty =
      get_number(j, "repetition_penalty", 0.01, 100.0).value_or(gen.repetition_penalty.value_or(1.0));
  if (auto s = get_int(j, "seed", INT64_MIN, INT64_MAX)) {
    c.sampling.seed = static_cast<uint64_t>(*s);
  } else {
    std::random_device rd;
    c.sampling.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  if (const Json* s = field(j, "stop")) {
    if (s->is_string()) {
      c.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > 16) bad("stop", "at most 16 stop strings");
      for (const Json& x : *s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
        c.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
    }
    for (const auto& x : c.stop)
      if (x.empty() || x.size() > 1024) bad("stop", "stop strings must be 1 to 1024 bytes");
  }
  c.stream = get_bool(j, "stream").value_or(false);
  if (const Json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object", "invalid_type");
    if (!c.stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
    c.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  c.ignore_eos = get_bool(j, "ignore_eos").value_or(false);
  if (chat) {
    const bool lp = get_bool(j, "logprobs").value_or(false);
    const auto top = get_int(j, "top_logprobs", 0, 20);
    if (top && !lp) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (lp) c.top_logprobs = static_cast<int>(top.value_or(0));
  } else {
    if (auto lp = get_int(j, "logprobs", 0, 5)) c.top_logprobs = static_cast<int>(*lp);
  }
  if (const Json* rf = field(j, "response_format")) c.json = parse_response_format(*rf, body);
  return c;
}

std::string text_of_content(const Json& content, const std::string& param) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string out;
    for (const Json& part : content) {
      if (!part.is_object()) bad(param, "content parts must be objects", "invalid_type");
      const std::string type = get_string(part, "type").value_or("");
      if (type != "text") bad(param, fmt::format("content part type '{}' is not supported (text only)", type));
      auto t = get_string(part, "text");
      if (!t) bad(param, "a text content part needs 'text'");
      out += *t;
    }
    return out;
  }
  bad(param, "'content' must be a string, an array of text parts or null", "invalid_type");
}

std::vector<ChatMessage> parse_messages(const Json& j) {
  const Json* ms = field(j, "messages");
  if (!ms) bad("messages", "'messages' is required", "missing_required_parameter");
  if (!ms->is_array()) bad("messages", "'messages' must be an array", "invalid_type");
  if (ms->empty()) bad("messages", "'messages' must not be empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < ms->size(); ++i) {
    const Json& m = (*ms)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(p, "each message must be an object", "invalid_type");
    auto role = get_string(m, "role");
    if (!role) bad(p + ".role", "each message needs a 'role'", "missing_required_parameter");
    ChatMessage cm;
    cm.role = *role == "developer" ? "system" : *role;
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
      bad(p + ".role", fmt::format("unknown role '{}'", *role));
    auto it = m.find("content");
    if (it == m.end() && cm.role != "assistant") bad(p + ".content", "'content' is required", "missing_required_parameter");
    if (it != m.end()) cm.content = text_of_content(*it, p + ".content");
    if (auto r = get_string(m, "reasoning_content")) cm.reasoning_content = *r;
    if (cm.role == "tool") cm.tool_call_id = get_string(m, "tool_call_id").value_or("");
    if (const Json* tcs = field(m, "tool_calls")) {
      if (cm.role != "assistant") bad(p + ".tool_calls", "only assistant messages have tool_calls");
      if (!tcs->is_array()) bad(p + ".tool_calls", "'tool_calls' must be an array", "invalid_type");
      for (const Json& tc : *tcs) {
        if (!tc.is_object()) bad(p + ".tool_calls", "each tool call must be an object", "invalid_type");
        const Json* fn = field(tc, "function");
        if (!fn || !fn->is_object()) bad(p + ".tool_calls", "each tool call needs a 'function' object");
        ToolCall call;
        call.id = get_string(tc, "id").value_or("");
        auto name = get_string(*fn, "name");
        if (!name || name->empty()) bad(p + ".tool_calls", "each tool call needs a function name");
        call.name = *name;
        if (const Json* a = field(*fn, "arguments")) {
          if (a->is_string()) {
            try {
              call.arguments = OrderedJson::parse(a->get<std::string>());
            } catch (const std::exception&) {
              bad(p + ".tool_calls", "function.arguments must be a JSON object (as a string)");
            }
          } else {
            call.arguments = OrderedJson::parse(a->dump());
          }
          if (!call.arguments.is_object()) bad(p + ".tool_calls", "function.arguments must be a JSON object");
        }
        cm.tool_calls.push_back(std::move(call));
      }
    }
    out.push_back(std::move(cm));
  }
  return out;
}

// Splits streamed GLM output into reasoning and content deltas. Text from a
// <tool_call> on is held back: tool calls are sent whole at the end.
class GlmStreamSplit {
 public:
  explicit GlmStreamSplit(bool reasoning_open) : reasoning_(reasoning_open) {}
  // Appends (reasoning, content) for `text`.
  void push(const std::string& text, std::string& reasoning, std::string& content, bool final) {
    pending_ += text;
    for (;;) {
      if (in_tool_) {
        pending_.clear();
        return;
      }
      const char* tag = reasoning_ ? "</think>" : nullptr;
      size_t at = std::string::npos, tag_len = 0;
      if (reasoning_) {
        at = pending_.find(tag);
        tag_len = 8;
      } else {
        const size_t a = pending_.find("<think>"), b = pending_.find("<tool_call>");
        at = std::min(a, b);
        tag_len = at == std::string::npos ? 0 : (at == a ? 7 : 11);
        if (at != std::string::npos && at == b) {
          content += pending_.substr(0, at);
          in_tool_ = true;
          continue;
        }
      }
      if (at == std::string::npos) break;
      (reasoning_ ? reasoning : content) += pending_.substr(0, at);
      pending_.erase(0, at + tag_len);
      reasoning_ = !reasoning_;
    }
    // Hold back a possible partial tag at the end.
    size_t keep = 0;
    if (!final) {
      for (const char* t : {"</think>", "<think>", "<tool_call>"}) {
        const std::string_view tv(t);
        for (size_t k = std::min(tv.size() - 1, pending_.size()); k > keep; --k)
          if (pending_.compare(pending_.size() - k, k, tv.substr(0, k)) == 0) {
            keep = k;
            break;
          }
      }
    }
    (reasoning_ ? reasoning : content) += pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
  }

 private:
  bool reasoning_;
  bool in_tool_ = false;
  std::string pending_;
};

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return fmt::format("{}-{:08x}{:04x}", prefix, rd(), static_cast<unsigned>(counter.fetch_add(1) & 0xffff));
}

}  // namespace

struct Server::Impl {
  ServerModel m;
  ChatTemplate tmpl;
  GenerationConfig gen;
  ServerOptions o;
  Scheduler sched;
  httplib::Server http;
  int listen_fd = -1;  // the listening socket, to widen its accept backlog
  int bound_port = -1;
  const uint64_t start_ns = now_ns();

  Impl(const ServerModel& m_, const ChatTemplate& t, const GenerationConfig& g, const ServerOptions& o_)
      : m(m_), tmpl(t), gen(g), o(o_), sched(m_, o_.sched) {
    setup();
  }

  int64_t ctx() const { return o.sched.ctx; }

  bool authorized(const httplib::Request& req) const {
    if (o.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (h.size() < kBearer.size() || h.compare(0, kBearer.size(), kBearer) != 0) return false;
    return same_key(std::string_view(h).substr(kBearer.size()), o.api_key);
  }

  Json parse_body(const httplib::Request& req) const {
    if (req.body.size() > o.max_body) throw ApiError{413, "the request body is too large", "", "invalid_request_error", "request_too_large"};
    Json j;
    try {
      j = parse_json(req.body, "request body");
    } catch (const std::exception& e) {
      bad("", fmt::format("the request body is not valid JSON: {}", e.what()), "invalid_json");
    }
    if (!j.is_object()) bad("", "the request body must be a JSON object", "invalid_type");
    return j;
  }

  // Tokens -> a Job with the limits applied.
  std::shared_ptr<Job> make_job(std::vector<int32_t> prompt, const Common& c) const {
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

  void submit(const std::shared_ptr<Job>& job) {
    if (!sched.submit(job))
      throw ApiError{429, "the server is busy (queue full); retry later", "", "rate_limit_error", "queue_full"};
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

  Json usage_json(const Job& job) const {
    return Json{{"prompt_tokens", job.prompt_tokens},
                {"completion_tokens", job.completion_tokens},
                {"total_tokens", job.prompt_tokens + job.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", job.cached_tokens}}}};
  }

  std::string token_text(int32_t id) const {
    const int32_t ids[1] = {id};
    return m.tok->decode(ids);
  }
  Json bytes_of(const std::string& s) const {
    Json b = Json::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  }
  // Token strings may be partial UTF-8; JSON needs valid text.
  static std::string safe_text(const std::string& s) {
    return Json::parse(Json(s).dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
  }
  Json chat_logprobs(const std::vector<TokenLogprob>& lps) const {
    Json content = Json::array();
    for (const auto& lp : lps) {
      const std::string t = token_text(lp.token);
      Json top = Json::array();
      for (auto [id, v] : lp.top) {
        const std::string tt = token_text(id);
        top.push_back({{"token", safe_text(tt)}, {"logprob", v}, {"bytes", bytes_of(tt)}});
      }
      content.push_back({{"token", safe_text(t)}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
    }
    return Json{{"content", content}};
  }
  Json completion_logprobs(const std::vector<TokenLogprob>& lps) const {
    Json tokens = Json::array(), tl = Json::array(), top = Json::array();
    for (const auto& lp : lps) {
      tokens.push_back(safe_text(token_text(lp.token)));
      tl.push_back(lp.logprob);
      Json t = Json::object();
      for (auto [id, v] : lp.top) t[safe_text(token_text(id))] = v;
      top.push_back(t);
    }
    return Json{{"tokens", tokens}, {"token_logprobs", tl}, {"top_logprobs", top}};
  }

  Json base(const char* object, const std::string& id) const {
    return Json{{"id", id}, {"object", object}, {"created", static_cast<int64_t>(std::time(nullptr))}, {"model", o.model_id}};
  }

  static void sse(httplib::DataSink& sink, const std::string& data, bool& ok) {
    if (!ok) return;
    const std::string s = "data: " + data + "\n\n";
    ok = sink.write(s.data(), s.size());
  }

  // Streams a job as SSE. `chunk(text, lps, finish)` makes one event's JSON.
  template <typename Chunk, typename Final>
  void stream(httplib::Response& res, std::shared_ptr<Job> job, Chunk chunk, Final final_chunk) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [job, chunk, final_chunk](size_t, httplib::DataSink& sink) {
          bool ok = true;
          for (const Json& first : chunk(std::string(), std::vector<TokenLogprob>{}, true)) sse(sink, first.dump(), ok);
          bool done = false;
          while (ok && !done) {
            std::string text;
            std::vector<TokenLogprob> lps;
            done = job->take(text, lps, 200);
            if (!text.empty() || !lps.empty())
              for (const Json& c : chunk(text, lps, false)) sse(sink, c.dump(-1, ' ', false, Json::error_handler_t::replace), ok);
          }
          if (!ok) {
            job->cancel = true;
            return false;
          }
          if (job->finish == Finish::Stop || job->finish == Finish::Length) {
            for (const Json& c : final_chunk()) sse(sink, c.dump(-1, ' ', false, Json::error_handler_t::replace), ok);
          } else {
            const ApiError e = job->finish == Finish::Timeout
                                   ? ApiError{504, "the request timed out", "", "timeout_error", "timeout"}
                                   : ApiError{500, "generation failed: " + job->error, "", "server_error", ""};
            sse(sink, error_json(e).dump(), ok);
          }
          sse(sink, "[DONE]", ok);
          sink.done();
          return true;
        });
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    const Json j = parse_body(req);
    const Common c = parse_common(j, gen, true, req.body);
    std::vector<ChatMessage> msgs = parse_messages(j);
    OrderedJson tools = nullptr;
    if (const Json* t = field(j, "tools")) {
      if (!t->is_array()) bad("tools", "'tools' must be an array", "invalid_type");
      for (const Json& x : *t) {
        if (!x.is_object() || get_string(x, "type").value_or("") != "function" || !field(x, "function") ||
            !x["function"].is_object() || !get_string(x["function"], "name"))
          bad("tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      if (!t->empty()) tools = OrderedJson::parse(t->dump());
    }
    // "required" or a named function: the answer is forced to be one tool
    // call (constrained decoding, text/tool_constraint.h).
    bool forced = false;
    std::string forced_name;
    if (const Json* tc = field(j, "tool_choice")) {
      if (tc->is_string()) {
        const std::string s = tc->get<std::string>();
        if (s == "none") tools = nullptr;
        else if (s == "required") forced = true;
        else if (s != "auto") bad("tool_choice", "'tool_choice' must be none, auto, required or an object");
      } else if (tc->is_object()) {
        if (get_string(*tc, "type").value_or("") != "function")
          bad("tool_choice.type", "'tool_choice.type' must be 'function'", "invalid_value");
        const Json* fn = field(*tc, "function");
        if (!fn || !fn->is_object())
          bad("tool_choice.function", "'tool_choice.function' must be an object with a 'name'", "invalid_type");
        const auto name = get_string(*fn, "name");
        if (!name || name->empty())
          bad("tool_choice.function.name", "'tool_choice.function.name' is required", "missing_required_parameter");
        forced = true;
        forced_name = *name;
      } else {
        bad("tool_choice", "'tool_choice' must be a string or an object", "invalid_type");
      }
    }
    std::shared_ptr<const ToolCallGrammar> tool_grammar;
    if (forced) {
      if (tools.is_null()) bad("tool_choice", "a required or named 'tool_choice' needs 'tools'");
      if (c.json) bad("response_format", "'response_format' cannot be combined with a required or named 'tool_choice'");
      if (tmpl.dialect != ChatDialect::Glm)
        bad("tool_choice", "a required or named 'tool_choice' needs a model with the GLM chat template");
      try {
        // Parsed again keeping key order: parameters are generated in schema order.
        const OrderedJson ordered = OrderedJson::parse(req.body);
        tool_grammar = ToolCallGrammar::build(ordered.at("tools"), forced_name);
      } catch (const Error& e) {
        const std::string what = e.what();
        if (what.rfind("tool_choice", 0) == 0) bad("tool_choice.function.name", what, "invalid_value");
        bad("tools", what, "unsupported_schema");
      } catch (const std::exception& e) {
        bad("tools", e.what(), "invalid_value");
      }
    }
    ChatRenderOptions ro;
    if (auto e = get_bool(j, "enable_thinking")) ro.enable_thinking = *e;
    if (const Json* kw = field(j, "chat_template_kwargs")) {
      if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object", "invalid_type");
      if (auto e = get_bool(*kw, "enable_thinking")) ro.enable_thinking = *e;
      if (auto e = get_bool(*kw, "clear_thinking")) ro.clear_thinking = *e;
    }
    // A JSON answer or a forced tool call is the whole answer: no reasoning block before it.
    if (c.json || forced) ro.enable_thinking = false;
    std::string prompt_text;
    try {
      prompt_text = tmpl.render(msgs, tools, ro);
    } catch (const Error& e) {
      bad("messages", e.what());
    }
    const bool raw = tmpl.dialect == ChatDialect::Raw;
    auto job = make_job(m.tok->encode(prompt_text, /*add_special=*/raw), c);
    if (tool_grammar)
      job->constraint = std::make_shared<ToolCallConstraint>(tool_grammar, json_vocab("tool_choice"), tool_markup_ids(*m.tok));
    const bool reasoning_open = tmpl.opens_reasoning(ro);
    // Constrained output is JSON as generated: not split by the GLM parser.
    const bool glm = tmpl.dialect == ChatDialect::Glm && !c.json;
    submit(job);
    const std::string id = random_id("chatcmpl");
    if (!c.stream) {
      std::vector<TokenLogprob> lps;
      const std::string text = wait(*job, lps);
      Json msg{{"role", "assistant"}};
      std::string finish = finish_name(job->finish);
      if (glm) {
        const ParsedOutput p = parse_glm_output(text, reasoning_open, tools);
        msg["content"] = p.content;
        if (!p.reasoning.empty()) msg["reasoning_content"] = p.reasoning;
        if (!p.tool_calls.empty()) {
          Json calls = Json::array();
          for (const ToolCall& t : p.tool_calls)
            calls.push_back({{"id", random_id("call")},
                             {"type", "function"},
                             {"function", {{"name", t.name}, {"arguments", t.arguments.dump()}}}});
          msg["tool_calls"] = calls;
          finish = "tool_calls";
        }
      } else {
        msg["content"] = text;
      }
      Json r = base("chat.completion", id);
      r["choices"] = Json::array({Json{{"index", 0},
                                       {"message", msg},
                                       {"logprobs", c.top_logprobs >= 0 ? chat_logprobs(lps) : Json(nullptr)},
                                       {"finish_reason", finish}}});
      r["usage"] = usage_json(*job);
      res.set_content(r.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
      return;
    }
    auto split = std::make_shared<GlmStreamSplit>(reasoning_open);
    auto full = std::make_shared<std::string>();
    const bool want_lp = c.top_logprobs >= 0;
    auto chunk_of = [this, id](Json delta, Json logprobs, Json finish) {
      Json ch = base("chat.completion.chunk", id);
      ch["choices"] = Json::array({Json{{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}}});
      return ch;
    };
    auto chunk = [=, this](const std::string& text, const std::vector<TokenLogprob>& lps, bool first) {
      std::vector<Json> out;
      if (first) {
        out.push_back(chunk_of(Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
        return out;
      }
      *full += text;
      std::string reasoning, content;
      if (glm) split->push(text, reasoning, content, false);
      else content = text;
      Json delta = Json::object();
      if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
      if (!content.empty()) delta["content"] = content;
      if (!delta.empty() || (want_lp && !lps.empty()))
        out.push_back(chunk_of(delta, want_lp ? chat_logprobs(lps) : Json(nullptr), nullptr));
      return out;
    };
    auto final_chunk = [=, this]() {
      std::vector<Json> out;
      std::string finish = finish_name(job->finish);
      Json delta = Json::object();
      if (glm) {
        std::string reasoning, content;
        split->push("", reasoning, content, true);
        if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
        if (!content.empty()) delta["content"] = content;
        const ParsedOutput p = parse_glm_output(*full, reasoning_open, tools);
        if (!p.tool_calls.empty()) {
          Json calls = Json::array();
          int i = 0;
          for (const ToolCall& t : p.tool_calls)
            calls.push_back({{"index", i++},
                             {"id", random_id("call")},
                             {"type", "function"},
                             {"function", {{"name", t.name}, {"arguments", t.arguments.dump()}}}});
          delta["tool_calls"] = calls;
          finish = "tool_calls";
        }
      }
      if (!delta.empty()) out.push_back(chunk_of(delta, nullptr, nullptr));
      out.push_back(chunk_of(Json::object(), nullptr, finish));
      if (c.include_usage) {
        Json u = base("chat.completion.chunk", id);
        u["choices"] = Json::array();
        u["usage"] = usage_json(*job);
        out.push_back(u);
      }
      return out;
    };
    stream(res, job, chunk, final_chunk);
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    const Json j = parse_body(req);
    const Common c = parse_common(j, gen, false, req.body);
    if (get_bool(j, "echo").value_or(false)) bad("echo", "'echo' is not supported yet");
    if (auto s = get_string(j, "suffix"); s && !s->empty()) bad("suffix", "'suffix' is not supported");
    const Json* p = field(j, "prompt");
    if (!p) bad("prompt", "'prompt' is required", "missing_required_parameter");
    std::vector<int32_t> ids;
    const int64_t vocab = m.engine->config().vocab_size;
    auto take_ids = [&](const Json& arr) {
      for (const Json& x : arr) {
        if (!x.is_number_integer() && !x.is_number_unsigned()) bad("prompt", "token ids must be integers", "invalid_type");
        const bool in_range = x.is_number_unsigned() ? x.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                                     : x.get<int64_t>() >= 0 && x.get<int64_t>() < vocab;
        if (!in_range) bad("prompt", fmt::format("token id {} is outside the vocabulary of {}", x.dump(), vocab));
        const int64_t v = x.get<int64_t>();
        ids.push_back(static_cast<int32_t>(v));
      }
    };
    if (p->is_string()) {
      ids = m.tok->encode(p->get<std::string>(), /*add_special=*/true);
    } else if (p->is_array()) {
      if (p->empty()) bad("prompt", "'prompt' must not be empty");
      const Json& first = (*p)[0];
      if (first.is_string() || first.is_array()) {
        if (p->size() != 1) bad("prompt", "only one prompt per request is supported");
        if (first.is_string()) ids = m.tok->encode(first.get<std::string>(), true);
        else take_ids(first);
      } else {
        take_ids(*p);
      }
    } else {
      bad("prompt", "'prompt' must be a string, an array of token ids or an array with one of those", "invalid_type");
    }
    auto job = make_job(std::move(ids), c);
    submit(job);
    const std::string id = random_id("cmpl");
    const bool want_lp = c.top_logprobs >= 0;
    auto chunk_of = [this, id](const std::string& text, Json logprobs, Json finish) {
      Json ch = base("text_completion", id);
      ch["choices"] = Json::array({Json{{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}}});
      return ch;
    };
    if (!c.stream) {
      std::vector<TokenLogprob> lps;
      const std::string text = wait(*job, lps);
      Json r = chunk_of(text, want_lp ? completion_logprobs(lps) : Json(nullptr), finish_name(job->finish));
      r["usage"] = usage_json(*job);
      res.set_content(r.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
      return;
    }
    auto chunk = [=, this](const std::string& text, const std::vector<TokenLogprob>& lps, bool first) {
      std::vector<Json> out;
      if (!first) out.push_back(chunk_of(text, want_lp ? completion_logprobs(lps) : Json(nullptr), nullptr));
      return out;
    };
    auto final_chunk = [=, this]() {
      std::vector<Json> out{chunk_of("", nullptr, finish_name(job->finish))};
      if (c.include_usage) {
        Json u = base("text_completion", id);
        u["choices"] = Json::array();
        u["usage"] = usage_json(*job);
        out.push_back(u);
      }
      return out;
    };
    stream(res, job, chunk, final_chunk);
  }

  Json stats_json() const {
    const SchedulerStats s = sched.stats();
    Json j;
    j["uptime_s"] = static_cast<double>(now_ns() - start_ns) / 1e9;
    j["model"] = o.model_id;
    j["requests"] = s.requests;
    j["requests_done"] = s.requests_done;
    j["rejected"] = s.rejected;
    j["timeouts"] = s.timeouts;
    j["cancelled"] = s.cancelled;
    j["errors"] = s.errors;
    j["prompt_tokens"] = s.prompt_tokens;
    j["prefilled_tokens"] = s.prefilled_tokens;
    j["cached_tokens"] = s.cached_tokens;
    j["generated_tokens"] = s.generated_tokens;
    j["tokens_per_second"] = s.gen_tok_s;
    j["ttft_avg_s"] = s.ttft_count ? static_cast<double>(s.ttft_ns_sum) / 1e9 / static_cast<double>(s.ttft_count) : 0.0;
    j["ttft_last_s"] = s.last_ttft_s;
    j["queue_depth"] = s.queued;
    j["active_requests"] = s.active;
    j["idle_sessions"] = s.idle_sessions;
    j["steps"] = s.steps;
    j["rows"] = s.rows;
    j["parallel"] = o.sched.parallel;
    j["ctx"] = o.sched.ctx;
    j["experts"] = stats_experts_json(s.engine);
    Json mem = stats_memory_json(s.engine);
    mem["session_bytes"] = s.session_bytes;
    // What the process may hold: model, expert cache, and every session
    // the scheduler may keep (active + idle), each sized to the context.
    const ModelConfig& c = m.engine->config();
    uint64_t per_pos = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      per_pos += static_cast<uint64_t>(c.kv_lora_rank + c.qk_rope_head_dim + (c.indexer_full(l) ? c.index_head_dim : 0));
    const uint64_t per_session = per_pos * sizeof(float) * static_cast<uint64_t>(o.sched.ctx);
    mem["session_budget_bytes"] = per_session * static_cast<uint64_t>(o.sched.parallel + o.sched.keep_sessions);
    j["memory"] = mem;
    j["kv_store"] = {{"enabled", m.kv != nullptr},
                     {"conversations", s.kv_conversations},
                     {"bytes_written", s.kv_bytes_written},
                     {"positions_loaded", s.kv_positions_loaded}};
    j["expert_heat"] = s.heat;
    return j;
  }

  std::string metrics() const {
    const Json s = stats_json();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      out += fmt::format("# HELP strata_{} {}\n# TYPE strata_{} {}\nstrata_{} {}\n", name, help, name, type, name, v);
    };
    metric("requests_total", "counter", "Requests accepted", s["requests"].get<double>());
    metric("requests_rejected_total", "counter", "Requests refused with 429 (queue full)", s["rejected"].get<double>());
    metric("requests_timeout_total", "counter", "Requests that timed out", s["timeouts"].get<double>());
    metric("prompt_tokens_total", "counter", "Prompt tokens of accepted requests", s["prompt_tokens"].get<double>());
    metric("prompt_tokens_cached_total", "counter", "Prompt tokens reused from idle sessions", s["cached_tokens"].get<double>());
    metric("tokens_generated_total", "counter", "Tokens generated", s["generated_tokens"].get<double>());
    metric("tokens_per_second", "gauge", "Generated tokens per second (last 5 s)", s["tokens_per_second"].get<double>());
    metric("time_to_first_token_seconds_avg", "gauge", "Mean time to first token", s["ttft_avg_s"].get<double>());
    metric("queue_depth", "gauge", "Requests waiting", s["queue_depth"].get<double>());
    metric("active_requests", "gauge", "Requests being generated", s["active_requests"].get<double>());
    metric("expert_hit_rate", "gauge", "Expert cache hit rate", s["experts"]["hit_rate"].get<double>());
    metric("expert_bytes_read_total", "counter", "Bytes of experts read from disk", s["experts"]["bytes_read"].get<double>());
    metric("resident_bytes", "gauge", "Resident model bytes", s["memory"]["resident_bytes"].get<double>());
    metric("session_bytes", "gauge", "KV state bytes of active and idle sessions", s["memory"]["session_bytes"].get<double>());
    return out;
  }

  template <typename F>
  auto guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        if (!authorized(req))
          throw ApiError{401, "invalid or missing API key (Authorization: Bearer ...)", "", "invalid_request_error",
                         "invalid_api_key"};
        (this->*f)(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::bad_alloc&) {
        send_error(res, ApiError{500, "out of memory", "", "server_error", ""});
      } catch (const std::exception& e) {
        send_error(res, ApiError{500, e.what(), "", "server_error", ""});
      }
    };
  }

  void health(const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  }
  void models(const httplib::Request&, httplib::Response& res) {
    Json d{{"id", o.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "strata"}};
    res.set_content(Json{{"object", "list"}, {"data", Json::array({d})}}.dump(), "application/json");
  }
  void stats(const httplib::Request&, httplib::Response& res) { res.set_content(stats_json().dump(), "application/json"); }
  void prom(const httplib::Request&, httplib::Response& res) { res.set_content(metrics(), "text/plain; version=0.0.4"); }

  void setup() {
    const size_t threads = static_cast<size_t>(o.sched.parallel + o.sched.queue + 8);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would let a
    // second server share the port silently); remember the socket.
    http.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd = sock;
    });
    http.set_payload_max_length(o.max_body);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.has_header("Content-Length")) {
        const std::string v = req.get_header_value("Content-Length");
        if (v.size() > 18 || std::strtoull(v.c_str(), nullptr, 10) > o.max_body) {
          send_error(res, ApiError{413, "the request body is too large", "", "invalid_request_error", "request_too_large"});
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e{res.status, "", "", "invalid_request_error", ""};
      if (res.status == 404) e.message = "no such endpoint", e.code = "not_found";
      else if (res.status == 413) e.message = "the request body is too large", e.code = "request_too_large";
      else if (res.status == 405) e.message = "method not allowed";
      else e.message = fmt::format("HTTP {}", res.status);
      if (res.status >= 500) e.type = "server_error";
      res.set_content(error_json(e).dump(), "application/json");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, ApiError{500, "internal error", "", "server_error", ""});
    });
    http.Get("/health", [this](const httplib::Request& q, httplib::Response& r) { health(q, r); });
    http.Get("/", [](const httplib::Request&, httplib::Response& r) { r.set_content(kDashboardHtml, "text/html; charset=utf-8"); });
    http.Get("/v1/models", guarded(&Impl::models));
    http.Get("/v1/stats", guarded(&Impl::stats));
    http.Get("/metrics", guarded(&Impl::prom));
    http.Post("/v1/chat/completions", guarded(&Impl::chat));
    http.Post("/v1/completions", guarded(&Impl::completions));
  }
};

Server::Server(const ServerModel& m, const ChatTemplate& tmpl, const GenerationConfig& gen, const ServerOptions& o)
    : impl_(std::make_unique<Impl>(m, tmpl, gen, o)) {}
Server::~Server() {
  stop();
}

int Server::bind() {
  Impl& i = *impl_;
  if (i.o.port == 0) i.bound_port = i.http.bind_to_any_port(i.o.host);
  else i.bound_port = i.http.bind_to_port(i.o.host, i.o.port) ? i.o.port : -1;
  if (i.bound_port <= 0) fail("serve: cannot listen on {}:{}", i.o.host, i.o.port);
  // httplib listens with a backlog of 5: a burst of clients overflows it and
  // some connections fail to read. Listening again only widens the queue.
  if (i.listen_fd >= 0) ::listen(i.listen_fd, 1024);
  return i.bound_port;
}
void Server::run() { impl_->http.listen_after_bind(); }
void Server::stop() {
  if (!impl_) return;
  impl_->sched.shutdown();  // in-flight requests end (cancelled) so HTTP threads can finish
  impl_->http.stop();
}
int Server::port() const { return impl_->bound_port; }

}  // namespace strata::server
