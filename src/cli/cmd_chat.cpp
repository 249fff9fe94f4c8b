// strata chat: an interactive conversation on stdin/stdout.
//
// Each turn re-renders the whole conversation through the chat template and
// prefills only what differs from what the session already holds (the
// shared prefix stays in the KV cache). Commands: :q quits, :reset clears the
// history and the cache, :more continues the last answer, :set changes a
// sampling setting. Ctrl-C during an answer ends the turn as if it had
// finished (the partial answer stays in the history); Ctrl-C while idle twice
// (or twice within a second) quits, as does end of input. A conversation that
// no longer fits the context is refused with a message (no sliding window):
// :reset, or restart with a larger --ctx.
//
// --attach URL talks to a running `strata serve` instead of loading a model:
// the same loop, each turn one streamed /v1/chat/completions request with the
// whole history (the server keeps the shared prefix in its KV cache).
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "cli/answer_view.h"
#include "cli/chat_loop.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_common.h"
#include "core/clock.h"
#include "core/error.h"
#include "server/glm_output.h"

namespace strata::cli {

namespace {

// Why connecting to http://HOST[:PORT] failed (httplib says only
// "Connection"): one plain connect() to the same address, named for a person.
std::string connect_failure(const std::string& base) {
  std::string hp = base.substr(std::string("http://").size());
  hp = hp.substr(0, hp.find('/'));
  std::string host = hp, port = "80";
  if (!hp.empty() && hp[0] == '[') {  // [v6]:port
    const size_t e = hp.find(']');
    host = hp.substr(1, e == std::string::npos ? std::string::npos : e - 1);
    if (e != std::string::npos && e + 1 < hp.size() && hp[e + 1] == ':') port = hp.substr(e + 2);
  } else if (const size_t c = hp.rfind(':'); c != std::string::npos) {
    host = hp.substr(0, c);
    port = hp.substr(c + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int g = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); g != 0)
    return fmt::format("cannot resolve {} ({})", host, ::gai_strerror(g));
  int err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    err = r == 0 ? 0 : errno;
    ::close(fd);
    if (err == 0) break;
  }
  ::freeaddrinfo(res);
  if (err == ECONNREFUSED) return "connection refused at " + base + " (is `strata serve` running there?)";
  if (err == 0) return "cannot connect to " + base + " (it accepts connections now: try again)";
  return fmt::format("cannot connect to {}: {}", base, std::strerror(err));
}

bool parse_bool(const std::string& v, bool& b) {
  if (v == "on" || v == "1" || v == "true") return b = true, true;
  if (v == "off" || v == "0" || v == "false") return b = false, true;
  return false;
}

// `strata chat --model`: the conversation and the model here. Each turn
// re-renders the history and the sequence prefills only what differs.
class LocalChat final : public ChatMode {
 public:
  LocalChat(Engine& e, const TextModel& tm, const TextFlags& tf, int64_t ctx, ChatSignals& sig)
      : e_(e), tm_(tm), tf_(tf), ctx_(ctx), sig_(sig), raw_(tm.raw()), seq_(e.config(), ctx, &tm.tok, tm.stop_ids, &e.speculator(), e.options().forward.kv) {
    so_ = tf.sampler_options(tm.gen);
    seq_.set_sampling(so_);
    n_max_ = tf.n;
    think_ = tf.thinking();
    ignore_eos_ = tf.ignore_eos;
    if (!tf.system.empty()) history_.push_back({.role = "system", .content = tf.system});
    base_ = history_.size();
  }
  bool thinking() const { return think_; }

  void turn(const std::string& line) override {
    history_.push_back({.role = "user", .content = raw_ ? line + "\n" : line});
    ChatRenderOptions ro;
    ro.enable_thinking = think_;
    const std::vector<int32_t> tokens = tm_.tok.encode(tm_.tmpl.render(history_, nullptr, ro), raw_);
    if (tokens.empty() || static_cast<int64_t>(tokens.size()) >= ctx_) {
      history_.pop_back();
      std::fprintf(stderr,
                   "(the conversation would be %zu tokens and the context is %lld: nothing was sent; :reset, or "
                   "restart with a larger --ctx)\n",
                   tokens.size(), static_cast<long long>(ctx_));
      return;
    }
    opened_reasoning_ = tm_.tmpl.opens_reasoning(ro);
    seq_.begin(tokens, params());
    TurnStats st;
    last_text_ = answer(opened_reasoning_, st).value_or("");
    last_reason_ = st.reason;
    history_.push_back(assistant_message(last_text_));
  }

  void reset() override {
    history_.resize(base_);
    seq_.clear();
    last_text_.clear();
  }

  std::optional<std::string> show_settings() override {
    seq_.set_sampling(so_);  // as any :set, showing the settings restarts the sampler from its seed
    return settings();
  }

  std::optional<std::string> set(const std::string& key, const std::string& val) override {
    bool ok = true;
    try {
      if (key == "n") {
        n_max_ = std::stoll(val);
      } else if (key == "temperature") {
        so_.temperature = std::stod(val);
        ok = so_.temperature >= 0;
      } else if (key == "top_k") {
        so_.top_k = std::stoll(val);
        ok = so_.top_k >= 0;
      } else if (key == "top_p") {
        so_.top_p = std::stod(val);
        ok = so_.top_p >= 0 && so_.top_p <= 1;
      } else if (key == "min_p") {
        so_.min_p = std::stod(val);
        ok = so_.min_p >= 0 && so_.min_p <= 1;
      } else if (key == "repeat_penalty") {
        so_.repetition_penalty = std::stod(val);
        ok = so_.repetition_penalty > 0;
      } else if (key == "seed") {
        so_.seed = std::stoull(val);
      } else if (key == "think") {
        ok = !raw_ && parse_bool(val, think_);
      } else if (key == "ignore_eos") {
        ok = parse_bool(val, ignore_eos_);
      } else {
        ok = false;
      }
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok) return std::nullopt;
    seq_.set_sampling(so_);
    return settings();
  }

  std::string set_usage() const override {
    return "(usage: :set n|temperature|top_k|top_p|min_p|repeat_penalty|seed|think|ignore_eos VALUE)\n";
  }

  bool more() override {
    if (history_.size() == base_ || history_.back().role != "assistant" || !seq_.can_continue()) {
      write_stdout("(no answer to continue)\n");
      return true;
    }
    GenerationParams gp = params();
    gp.ban_stops_first = last_reason_ == StopReason::Eos;
    seq_.resume(gp);
    TurnStats st;
    const bool in_reasoning = !raw_ && !parse_chat_output(tm_.tmpl.dialect, last_text_, opened_reasoning_).reasoning_complete;
    last_text_ += answer(in_reasoning, st).value_or("");
    last_reason_ = st.reason;
    history_.back() = assistant_message(last_text_);
    return true;
  }

  std::string commands() const override { return "(commands: :q, :reset, :more, :set KEY VALUE)\n"; }
  bool quick_double_quits() const override { return true; }

 private:
  GenerationParams params() const {
    GenerationParams gp = tf_.params(so_);
    gp.max_tokens = n_max_;
    gp.ignore_eos = ignore_eos_;
    return gp;
  }

  std::string settings() const {
    return fmt::format("(n {}, temperature {}, top_k {}, top_p {}, min_p {}, repeat_penalty {}, seed {}, think {}, "
                       "ignore_eos {})\n",
                       n_max_, so_.temperature, so_.top_k, so_.top_p, so_.min_p, so_.repetition_penalty, so_.seed,
                       think_ ? "on" : "off", ignore_eos_ ? "on" : "off");
  }

  ChatMessage assistant_message(const std::string& text) const {
    ChatMessage m{.role = "assistant"};
    if (raw_) {
      m.content = text;
    } else {
      const ParsedOutput p = parse_chat_output(tm_.tmpl.dialect, text, opened_reasoning_);
      m.content = p.content;
      m.reasoning_content = p.reasoning;
    }
    return m;
  }

  // Runs one answer (begun or resumed): prefill, then tokens as they come;
  // prints the footer. `opens_think`: the output starts inside a reasoning
  // block (the generation prompt opened one, or :more continues one).
  // nullopt: Ctrl-C came during the prompt.
  std::optional<std::string> answer(bool opens_think, TurnStats& st) {
    const ExpertStoreStats before = e_.experts().stats();
    std::string shown;
    // Reasoning and content split as the server splits them, so that the
    // attached chat prints the same (cli/answer_view.h).
    AnswerView view(stdout, ::isatty(STDOUT_FILENO) == 1, /*safe=*/true);
    server::GlmStreamSplit split(opens_think, tool_call_open_tag(tm_.tmpl.dialect));
    const auto show = [&](const std::string& text, bool final) {
      if (raw_) return view.content(text);
      std::string r, c;
      split.push(text, r, c, final);
      view.reasoning(r);
      view.content(c);
    };
    st = run_turn(
        e_, seq_,
        [&](const StepOutput& o) {
          shown += o.text;
          if (!o.text.empty()) show(o.text, false);
        },
        [this] { return sig_.interrupted(); });
    if (st.reason == StopReason::Interrupted && seq_.prefilling()) {
      sig_.seen = sigint_count();
      sig_.last_ns = now_ns();
      std::fprintf(stderr, "[interrupted during the prompt]\n");
      return std::nullopt;
    }
    show("", true);
    view.finish();
    const uint64_t t_decode = st.first_token_ns ? st.first_token_ns : st.end_ns;
    const uint64_t sig_now = sigint_count();
    if (sig_now != sig_.seen) {
      if (sig_now - sig_.seen >= 2) sig_.quit = true;
      sig_.seen = sig_now;
      sig_.last_ns = now_ns();
      st.reason = StopReason::Interrupted;
    }
    std::string hit = "experts resident";
    if (e_.experts().memory().on_disk) {
      const ExpertStoreStats a = e_.experts().stats();
      const uint64_t req = a.requests - before.requests, hits = a.hits - before.hits;
      hit = req ? fmt::format("experts hit {:.1f}%", 100.0 * static_cast<double>(hits) / static_cast<double>(req))
                : "experts hit n/a";
    }
    const double dec_s = static_cast<double>(st.end_ns - t_decode) / 1e9;
    const double ttft = st.first_token_ns ? static_cast<double>(st.first_token_ns - st.start_ns) / 1e9 : 0.0;
    write_stdout("\n");
    std::fprintf(stderr, "[%lld tokens, %.1f tok/s, first token %.3f s, prompt %lld new + %lld cached, %s%s%s]\n",
                 static_cast<long long>(st.generated), dec_s > 0 ? static_cast<double>(st.generated) / dec_s : 0.0,
                 ttft, static_cast<long long>(st.prefilled), static_cast<long long>(st.reused), hit.c_str(),
                 st.reason == StopReason::Eos ? "" : " | ",
                 st.reason == StopReason::Eos ? "" : stop_reason_name(st.reason));
    return shown;
  }

  Engine& e_;
  const TextModel& tm_;
  const TextFlags& tf_;
  int64_t ctx_;
  ChatSignals& sig_;
  bool raw_;
  Sequence seq_;
  SamplerOptions so_;
  int64_t n_max_ = -1;
  bool think_ = true, ignore_eos_ = false;
  std::vector<ChatMessage> history_;
  size_t base_ = 0;
  std::string last_text_;  // what the last answer showed (for :more)
  StopReason last_reason_ = StopReason::Eos;
  bool opened_reasoning_ = false;
};

// `strata chat --attach URL`: the conversation here, generation on the
// server. Each turn is one streamed /v1/chat/completions request with the
// whole history (the server keeps the shared prefix in its KV cache); Ctrl-C
// closes the request (the server cancels it) and keeps the partial answer.
class AttachedChat final : public ChatMode {
 public:
  AttachedChat(const std::string& url, const std::string& api_key, const TextFlags& tf, ChatSignals& sig)
      : url_(url), base_(url), sig_(sig) {
    while (!base_.empty() && base_.back() == '/') base_.pop_back();
    if (base_.size() >= 3 && base_.substr(base_.size() - 3) == "/v1") base_.resize(base_.size() - 3);
    if (base_.rfind("http://", 0) != 0) fail("--attach {}: expected http://HOST:PORT (https is not supported)", url);
    cli_ = std::make_unique<httplib::Client>(base_);
    if (!cli_->is_valid()) fail("--attach {}: not a valid URL", url);
    cli_->set_connection_timeout(5, 0);
    cli_->set_read_timeout(3600, 0);
    if (!api_key.empty()) headers_.emplace("Authorization", "Bearer " + api_key);
    auto r = cli_->Get("/v1/models", headers_);
    if (!r && r.error() == httplib::Error::Connection) fail("chat --attach: {}", connect_failure(base_));
    if (!r) fail("--attach {}: cannot connect ({})", url, httplib::to_string(r.error()));
    if (r->status != 200) fail("--attach {}: /v1/models answered HTTP {}: {}", url, r->status, r->body);
    try {
      const Json j = Json::parse(r->body);
      model_id_ = j.at("data").at(0).at("id").get<std::string>();
    } catch (const std::exception&) {
      fail("--attach {}: /v1/models did not answer an OpenAI model list", url);
    }
    n_max_ = tf.n;
    think_ = tf.thinking();
    if (!tf.system.empty()) history_.push_back({{"role", "system"}, {"content", tf.system}});
    base_len_ = history_.size();
    if (tf.temperature >= 0) sampling_["temperature"] = tf.temperature;
    if (tf.top_p >= 0) sampling_["top_p"] = tf.top_p;
    if (tf.top_k >= 0) sampling_["top_k"] = tf.top_k;
    if (tf.min_p >= 0) sampling_["min_p"] = tf.min_p;
    if (tf.seed >= 0) sampling_["seed"] = tf.seed;
    if (tf.repeat_penalty >= 0) sampling_["repetition_penalty"] = tf.repeat_penalty;
    if (tf.presence_penalty != 0) sampling_["presence_penalty"] = tf.presence_penalty;
    if (tf.frequency_penalty != 0) sampling_["frequency_penalty"] = tf.frequency_penalty;
    if (!tf.stop.empty()) sampling_["stop"] = tf.stop;
  }
  const std::string& base() const { return base_; }
  const std::string& model_id() const { return model_id_; }
  bool thinking() const { return think_; }

  void reset() override {
    history_.erase(history_.begin() + static_cast<std::ptrdiff_t>(base_len_), history_.end());
  }

  std::optional<std::string> set(const std::string& key, const std::string& val) override {
    bool ok = true;
    try {
      if (key == "n") {
        n_max_ = std::stoll(val);
      } else if (key == "think") {
        ok = parse_bool(val, think_);
      } else if (key == "seed" || key == "top_k") {
        sampling_[key] = std::stoll(val);
      } else if (key == "temperature" || key == "top_p" || key == "min_p") {
        sampling_[key] = std::stod(val);
      } else {
        ok = false;
      }
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok) return std::nullopt;
    return "(" + sampling_.dump() + ", n " + std::to_string(n_max_) + ", think " + (think_ ? "on" : "off") + ")\n";
  }

  std::string set_usage() const override { return "(usage: :set n|temperature|top_k|top_p|min_p|seed|think VALUE)\n"; }
  std::string commands() const override { return "(commands: :q, :reset, :set KEY VALUE; :more needs a local model)\n"; }

  void turn(const std::string& line) override {
    std::vector<Json>& history = history_;
    const std::string& model_id = model_id_;
    const bool think = think_;
    const int64_t n_max = n_max_;
    const Json& sampling = sampling_;
    const httplib::Headers& headers = headers_;
    httplib::Client& cli = *cli_;
    history.push_back(Json{{"role", "user"}, {"content", line}});
    Json req = sampling;
    req["model"] = model_id;
    req["messages"] = Json(history);
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    req["enable_thinking"] = think;
    if (n_max > 0) req["max_tokens"] = n_max;

    std::string buf, content, reasoning, finish, error_body;
    AnswerView view(stdout, ::isatty(STDOUT_FILENO) == 1, /*safe=*/true);
    Json usage;
    const uint64_t t0 = now_ns();
    uint64_t t_first = 0;
    int status = 0;
    httplib::Request hreq;
    hreq.method = "POST";
    hreq.path = "/v1/chat/completions";
    hreq.headers = headers;
    hreq.headers.emplace("Content-Type", "application/json");
    hreq.body = req.dump();
    hreq.response_handler = [&](const httplib::Response& res) {
      status = res.status;
      return true;
    };
    hreq.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      if (status != 200) {
        error_body.append(data, len);
        return true;
      }
      buf.append(data, len);
      for (size_t e; (e = buf.find("\n\n")) != std::string::npos;) {
        const std::string ev = buf.substr(0, e);
        buf.erase(0, e + 2);
        if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
        Json j;
        try {
          j = Json::parse(ev.substr(6));
        } catch (const std::exception&) {
          continue;
        }
        if (j.contains("usage") && j["usage"].is_object()) usage = j["usage"];
        if (!j.contains("choices") || j["choices"].empty()) continue;
        const Json& ch = j["choices"][0];
        const Json& d = ch.value("delta", Json::object());
        if (d.contains("reasoning_content") && d["reasoning_content"].is_string()) {
          if (!t_first) t_first = now_ns();
          const std::string t = d["reasoning_content"].get<std::string>();
          reasoning += t;
          view.reasoning(t);
        }
        if (d.contains("content") && d["content"].is_string()) {
          if (!t_first) t_first = now_ns();
          const std::string t = d["content"].get<std::string>();
          content += t;
          view.content(t);
        }
        if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) finish = ch["finish_reason"];
      }
      return sigint_count() == sig_.seen;  // Ctrl-C: close the request, keep what came
    };
    httplib::Response hres;
    httplib::Error herr = httplib::Error::Success;
    const bool sent = cli.send(hreq, hres, herr);
    const bool interrupted = sigint_count() != sig_.seen;
    sig_.seen = sigint_count();
    view.finish();
    write_stdout("\n");
    if (status != 200 && status != 0) {
      std::string msg = error_body.empty() ? hres.body : error_body;
      try {
        msg = Json::parse(msg).at("error").at("message").get<std::string>();
      } catch (const std::exception&) {
      }
      std::fprintf(stderr, "(the server answered HTTP %d: %s)\n", status, msg.c_str());
      history.erase(history.end() - 1);
      return;
    }
    if (!sent && !interrupted && status == 0) {
      std::fprintf(stderr, "(request failed: %s)\n", httplib::to_string(herr).c_str());
      history.erase(history.end() - 1);
      return;
    }
    history.push_back(Json{{"role", "assistant"}, {"content", content}});
    const double secs = static_cast<double>(now_ns() - t0) / 1e9;
    const int64_t gen = usage.is_object() ? usage.value("completion_tokens", int64_t{0}) : 0;
    const int64_t cached = usage.is_object() && usage.contains("prompt_tokens_details")
                               ? usage["prompt_tokens_details"].value("cached_tokens", int64_t{0})
                               : 0;
    const int64_t prompt = usage.is_object() ? usage.value("prompt_tokens", int64_t{0}) : 0;
    const double ttft = t_first ? static_cast<double>(t_first - t0) / 1e9 : 0.0;
    const double dec = t_first ? static_cast<double>(now_ns() - t_first) / 1e9 : secs;
    std::fprintf(stderr, "[%lld tokens, %.1f tok/s, first token %.3f s, prompt %lld new + %lld cached%s%s]\n",
                 static_cast<long long>(gen), dec > 0 && gen > 1 ? static_cast<double>(gen - 1) / dec : 0.0, ttft,
                 static_cast<long long>(prompt - cached), static_cast<long long>(cached),
                 interrupted ? " | interrupted" : finish.empty() || finish == "stop" ? "" : " | ",
                 interrupted ? "" : finish == "stop" ? "" : finish.c_str());
  }

 private:
  std::string url_, base_;
  ChatSignals& sig_;
  std::unique_ptr<httplib::Client> cli_;
  httplib::Headers headers_;
  std::string model_id_ = "strata";
  int64_t n_max_ = -1;
  bool think_ = true;
  std::vector<Json> history_;
  size_t base_len_ = 0;
  Json sampling_ = Json::object();
};

}  // namespace

void add_chat_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    TextFlags text;
    std::string attach, api_key;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat (:q quit, :reset, :more, :set KEY VALUE)");
  f->engine.spec = kSpecGenerating;  // the generating commands speculate by default
  f->engine.add(cmd);
  f->text.add(cmd);
  cmd->get_option("--model")->required(false);
  cmd->add_option("--attach", f->attach, "Chat with a running `strata serve` (http://HOST:PORT) instead of loading --model")
      ->group(kGroupAttach);
  cmd->add_option("--api-key", f->api_key, "With --attach: the server's API key")->group(kGroupAttach);
  cmd->callback([f, &run] {
    if (f->attach.empty() && f->engine.model.empty()) throw CLI::RequiredError("--model (or --attach URL)");
    if (!f->attach.empty() && !f->engine.model.empty()) throw CLI::ValidationError("--attach", "use either --model or --attach");
    run = [f]() -> int {
      ChatSignals sig;
      if (!f->attach.empty()) {
        AttachedChat chat(f->attach, f->api_key, f->text, sig);
        install_sigint_counter(/*once=*/false);
        sig.seen = sigint_count();
        std::fprintf(stderr,
                     "strata chat: attached to %s (model %s) | thinking %s\n  :q quit, :reset clear, :set KEY VALUE "
                     "(n, temperature, top_k, top_p, min_p, seed, think)\n",
                     chat.base().c_str(), chat.model_id().c_str(), chat.thinking() ? "on" : "off");
        run_chat_loop(chat, sig);
        return 0;
      }
      OpenedEngine opened = open_engine(f->engine, false, /*deferred=*/true);
      if (!opened.engine) return opened.status;  // a rank > 0 of --experts-over mpi
      Engine& e = *opened.engine;
      const TextModel tm = open_text_model(f->engine.model, e.config(), f->text.chat_template, false);
      f->engine.announce(e);
      const int64_t ctx = context_size(e.config(), f->text.ctx);
      LocalChat chat(e, tm, f->text, ctx, sig);
      install_sigint_counter(/*once=*/false);
      sig.seen = sigint_count();
      std::fprintf(stderr,
                   "strata chat: %s | template: %s | context %lld tokens | thinking %s\n"
                   "  :q quit, :reset clear, :more continue, :set KEY VALUE (n, temperature, top_k, top_p, min_p,\n"
                   "  repeat_penalty, seed, think, ignore_eos); Ctrl-C stops an answer, twice when idle quits\n",
                   f->engine.model.c_str(), tm.tmpl.source.c_str(), static_cast<long long>(ctx),
                   tm.raw()       ? "n/a"
                   : chat.thinking() ? "on"
                                     : "off");
      run_chat_loop(chat, sig);
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
