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
#include <poll.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_common.h"
#include "core/clock.h"
#include "core/error.h"

namespace strata::cli {

namespace {

// Lines from a file descriptor, without stdio: a Ctrl-C while waiting must
// wake us (poll() returns EINTR even under SA_RESTART).
class LineReader {
 public:
  enum class Result { Line, Eof, Interrupted };
  explicit LineReader(int fd) : fd_(fd) {}
  Result next(std::string& line, const std::function<bool()>& interrupted) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return Result::Line;
      }
      if (eof_) {
        if (buf_.empty()) return Result::Eof;
        line = std::move(buf_);
        buf_.clear();
        return Result::Line;
      }
      if (interrupted()) return Result::Interrupted;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, -1);
      if (r < 0) {
        if (errno == EINTR) continue;  // interrupted() decides
        eof_ = true;
        continue;
      }
      char tmp[4096];
      const ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        eof_ = true;
      }
    }
  }

 private:
  int fd_;
  std::string buf_;
  bool eof_ = false;
};

void out(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

bool parse_bool(const std::string& v, bool& b) {
  if (v == "on" || v == "1" || v == "true") return b = true, true;
  if (v == "off" || v == "0" || v == "false") return b = false, true;
  return false;
}


// `strata chat --attach URL`: the conversation lives here, generation on the
// server. Answers stream as the server sends them; Ctrl-C closes the request
// (the server cancels it) and keeps the partial answer.
int chat_attached(const std::string& url, const std::string& api_key, const TextFlags& tf) {
  std::string base = url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (base.size() >= 3 && base.substr(base.size() - 3) == "/v1") base.resize(base.size() - 3);
  if (base.rfind("http://", 0) != 0)
    fail("--attach {}: expected http://HOST:PORT (https is not supported)", url);
  httplib::Client cli(base);
  if (!cli.is_valid()) fail("--attach {}: not a valid URL", url);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(3600, 0);
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);

  std::string model_id = "strata";
  {
    auto r = cli.Get("/v1/models", headers);
    if (!r) fail("--attach {}: cannot connect ({})", url, httplib::to_string(r.error()));
    if (r->status != 200) fail("--attach {}: /v1/models answered HTTP {}: {}", url, r->status, r->body);
    try {
      const Json j = Json::parse(r->body);
      model_id = j.at("data").at(0).at("id").get<std::string>();
    } catch (const std::exception&) {
      fail("--attach {}: /v1/models did not answer an OpenAI model list", url);
    }
  }

  int64_t n_max = tf.n;
  bool think = !tf.no_think;
  Json history = Json::array();
  if (!tf.system.empty()) history.push_back({{"role", "system"}, {"content", tf.system}});
  const size_t base_len = history.size();
  const bool tty_in = ::isatty(STDIN_FILENO) == 1;
  install_sigint_counter(/*once=*/false);
  uint64_t sig_seen = sigint_count();
  std::fprintf(stderr, "strata chat: attached to %s (model %s) | thinking %s\n  :q quit, :reset clear, :set KEY VALUE (n, temperature, top_k, top_p, min_p, seed, think)\n",
               base.c_str(), model_id.c_str(), think ? "on" : "off");
  Json sampling = Json::object();
  if (tf.temperature >= 0) sampling["temperature"] = tf.temperature;
  if (tf.top_p >= 0) sampling["top_p"] = tf.top_p;
  if (tf.top_k >= 0) sampling["top_k"] = tf.top_k;
  if (tf.min_p >= 0) sampling["min_p"] = tf.min_p;
  if (tf.seed >= 0) sampling["seed"] = tf.seed;
  if (tf.repeat_penalty >= 0) sampling["repetition_penalty"] = tf.repeat_penalty;
  if (tf.presence_penalty != 0) sampling["presence_penalty"] = tf.presence_penalty;
  if (tf.frequency_penalty != 0) sampling["frequency_penalty"] = tf.frequency_penalty;
  if (!tf.stop.empty()) sampling["stop"] = tf.stop;

  LineReader reader(STDIN_FILENO);
  std::string line;
  bool armed = false;
  for (;;) {
    if (tty_in) out("> ");
    const LineReader::Result r = reader.next(line, [&] { return sigint_count() != sig_seen; });
    if (r == LineReader::Result::Eof) {
      if (tty_in) out("\n");
      break;
    }
    if (r == LineReader::Result::Interrupted) {
      sig_seen = sigint_count();
      if (armed) break;
      armed = true;
      out("\n(Ctrl-C again or :q to quit)\n");
      continue;
    }
    armed = false;
    if (line == ":q" || line == ":quit" || line == ":exit") break;
    if (line.empty()) continue;
    if (line == ":reset") {
      history.erase(history.begin() + static_cast<std::ptrdiff_t>(base_len), history.end());
      out("(history and context cleared)\n");
      continue;
    }
    if (line.rfind(":set ", 0) == 0) {
      const size_t k0 = line.find_first_not_of(' ', 5), k1 = line.find(' ', k0 == std::string::npos ? 5 : k0);
      const std::string key = k0 == std::string::npos ? "" : line.substr(k0, k1 == std::string::npos ? std::string::npos : k1 - k0);
      const std::string val = k1 == std::string::npos ? "" : line.substr(line.find_first_not_of(' ', k1) == std::string::npos ? line.size() : line.find_first_not_of(' ', k1));
      bool ok = !val.empty();
      try {
        if (!ok) {
        } else if (key == "n") {
          n_max = std::stoll(val);
        } else if (key == "think") {
          ok = parse_bool(val, think);
        } else if (key == "seed" || key == "top_k") {
          sampling[key] = std::stoll(val);
        } else if (key == "temperature" || key == "top_p" || key == "min_p") {
          sampling[key] = std::stod(val);
        } else {
          ok = false;
        }
      } catch (const std::exception&) {
        ok = false;
      }
      out(ok ? "(" + sampling.dump() + ", n " + std::to_string(n_max) + ", think " + (think ? "on" : "off") + ")\n"
             : std::string("(usage: :set n|temperature|top_k|top_p|min_p|seed|think VALUE)\n"));
      continue;
    }
    if (line[0] == ':' && line.size() > 1 && std::isalpha(static_cast<unsigned char>(line[1])) &&
        line.find(' ') == std::string::npos) {
      out("(commands: :q, :reset, :set KEY VALUE; :more needs a local model)\n");
      continue;
    }

    history.push_back({{"role", "user"}, {"content", line}});
    Json req = sampling;
    req["model"] = model_id;
    req["messages"] = history;
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    req["enable_thinking"] = think;
    if (n_max > 0) req["max_tokens"] = n_max;

    std::string buf, content, reasoning, finish, error_body;
    bool in_reasoning = false;
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
          if (!in_reasoning) out("<think>"), in_reasoning = true;
          const std::string t = d["reasoning_content"].get<std::string>();
          reasoning += t;
          out(terminal_safe(t));
        }
        if (d.contains("content") && d["content"].is_string()) {
          if (!t_first) t_first = now_ns();
          if (in_reasoning) out("</think>"), in_reasoning = false;
          const std::string t = d["content"].get<std::string>();
          content += t;
          out(terminal_safe(t));
        }
        if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) finish = ch["finish_reason"];
      }
      return sigint_count() == sig_seen;  // Ctrl-C: close the request, keep what came
    };
    httplib::Response hres;
    httplib::Error herr = httplib::Error::Success;
    const bool sent = cli.send(hreq, hres, herr);
    const bool interrupted = sigint_count() != sig_seen;
    sig_seen = sigint_count();
    if (in_reasoning) out("</think>");
    out("\n");
    if (status != 200 && status != 0) {
      std::string msg = error_body.empty() ? hres.body : error_body;
      try {
        msg = Json::parse(msg).at("error").at("message").get<std::string>();
      } catch (const std::exception&) {
      }
      std::fprintf(stderr, "(the server answered HTTP %d: %s)\n", status, msg.c_str());
      history.erase(history.end() - 1);
      continue;
    }
    if (!sent && !interrupted && status == 0) {
      std::fprintf(stderr, "(request failed: %s)\n", httplib::to_string(herr).c_str());
      history.erase(history.end() - 1);
      continue;
    }
    Json msg = {{"role", "assistant"}, {"content", content}};
    history.push_back(msg);
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
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    TextFlags text;
    std::string attach, api_key;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat (:q quit, :reset, :more, :set KEY VALUE)");
  f->engine.add(cmd);
  f->text.add(cmd);
  cmd->get_option("--model")->required(false);
  cmd->add_option("--attach", f->attach, "Chat with a running `strata serve` (http://HOST:PORT) instead of loading --model");
  cmd->add_option("--api-key", f->api_key, "With --attach: the server's API key");
  cmd->callback([f, &run] {
    if (f->attach.empty() && f->engine.model.empty()) throw CLI::RequiredError("--model (or --attach URL)");
    if (!f->attach.empty() && !f->engine.model.empty()) throw CLI::ValidationError("--attach", "use either --model or --attach");
    run = [f]() -> int {
      if (!f->attach.empty()) return chat_attached(f->attach, f->api_key, f->text);
      Engine e(f->engine.options(false));
      const ModelConfig& c = e.config();
      const TextModel tm = open_text_model(f->engine.model, c, f->text.chat_template, false);
      const int64_t ctx = context_size(c, f->text.ctx);
      const bool raw = tm.raw();
      const bool tty_in = ::isatty(STDIN_FILENO) == 1;

      SamplerOptions so = f->text.sampler_options(tm.gen);
      Sequence seq(c, ctx, &tm.tok, tm.stop_ids);
      seq.set_sampling(so);
      int64_t n_max = f->text.n;
      bool think = !f->text.no_think, ignore_eos = f->text.ignore_eos;
      // Each answer's parameters: the current sampling settings and limits.
      auto turn_params = [&] {
        GenerationParams gp = f->text.params(so);
        gp.max_tokens = n_max;
        gp.ignore_eos = ignore_eos;
        return gp;
      };

      std::vector<ChatMessage> history;
      if (!f->text.system.empty()) history.push_back({.role = "system", .content = f->text.system});
      const size_t base = history.size();
      std::string last_text;  // what the last answer showed (for :more)
      StopReason last_reason = StopReason::Eos;
      bool opened_reasoning = false;

      install_sigint_counter(/*once=*/false);
      uint64_t sig_seen = sigint_count();
      uint64_t last_sigint_ns = 0;
      bool idle_armed = false;  // one Ctrl-C seen while idle
      bool quit = false;
      // During a turn: a new Ctrl-C ends it; two of them quit afterwards.
      const auto turn_interrupted = [&] { return sigint_count() != sig_seen; };

      std::fprintf(stderr,
                   "strata chat: %s | template: %s | context %lld tokens | thinking %s\n"
                   "  :q quit, :reset clear, :more continue, :set KEY VALUE (n, temperature, top_k, top_p, min_p,\n"
                   "  repeat_penalty, seed, think, ignore_eos); Ctrl-C stops an answer, twice when idle quits\n",
                   f->engine.model.c_str(), tm.tmpl.source.c_str(), static_cast<long long>(ctx),
                   raw     ? "n/a"
                   : think ? "on"
                           : "off");

      auto assistant_message = [&](const std::string& text) {
        ChatMessage m{.role = "assistant"};
        if (raw) {
          m.content = text;
        } else {
          const ParsedOutput p = parse_glm_output(text, opened_reasoning);
          m.content = p.content;
          m.reasoning_content = p.reasoning;
        }
        return m;
      };

      // Runs one answer (begun or resumed on `seq`): prefill, then tokens as
      // they come; prints the footer. `think`: print <think> once the prompt
      // is in (the generation prompt opened a reasoning block).
      auto answer = [&](bool opens_think, TurnStats& st) {
        const ExpertStoreStats before = e.experts().stats();
        std::string shown;
        bool opened = false;
        auto open = [&] {
          if (opens_think && !opened) out("<think>");
          opened = true;
        };
        st = run_turn(
            e, seq,
            [&](const StepOutput& o) {
              open();
              shown += o.text;
              if (!o.text.empty()) out(terminal_safe(o.text));
            },
            turn_interrupted);
        if (st.reason == StopReason::Interrupted && seq.prefilling()) {
          sig_seen = sigint_count();
          last_sigint_ns = now_ns();
          std::fprintf(stderr, "[interrupted during the prompt]\n");
          return std::optional<std::string>();
        }
        open();
        const uint64_t t_decode = st.first_token_ns ? st.first_token_ns : st.end_ns;
        const uint64_t sig_now = sigint_count();
        if (sig_now != sig_seen) {
          if (sig_now - sig_seen >= 2) quit = true;
          sig_seen = sig_now;
          last_sigint_ns = now_ns();
          st.reason = StopReason::Interrupted;
        }
        std::string hit = "experts resident";
        if (e.experts().memory().on_disk) {
          const ExpertStoreStats a = e.experts().stats();
          const uint64_t req = a.requests - before.requests, hits = a.hits - before.hits;
          hit = req ? fmt::format("experts hit {:.1f}%", 100.0 * static_cast<double>(hits) / static_cast<double>(req))
                    : "experts hit n/a";
        }
        const double dec_s = static_cast<double>(st.end_ns - t_decode) / 1e9;
        const double ttft = st.first_token_ns ? static_cast<double>(st.first_token_ns - st.start_ns) / 1e9 : 0.0;
        out("\n");
        std::fprintf(stderr, "[%lld tokens, %.1f tok/s, first token %.3f s, prompt %lld new + %lld cached, %s%s%s]\n",
                     static_cast<long long>(st.generated), dec_s > 0 ? static_cast<double>(st.generated) / dec_s : 0.0,
                     ttft, static_cast<long long>(st.prefilled), static_cast<long long>(st.reused), hit.c_str(),
                     st.reason == StopReason::Eos ? "" : " | ",
                     st.reason == StopReason::Eos ? "" : stop_reason_name(st.reason));
        return std::optional<std::string>(shown);
      };

      LineReader reader(STDIN_FILENO);
      std::string line;
      while (!quit) {
        if (tty_in) out("> ");
        const LineReader::Result r = reader.next(line, [&] { return sigint_count() != sig_seen; });
        if (r == LineReader::Result::Eof) {
          if (tty_in) out("\n");
          break;
        }
        if (r == LineReader::Result::Interrupted) {
          sig_seen = sigint_count();
          const uint64_t t = now_ns();
          if (idle_armed || (last_sigint_ns && t - last_sigint_ns < 1000000000ull)) break;
          idle_armed = true;
          last_sigint_ns = t;
          out("\n(Ctrl-C again or :q to quit)\n");
          continue;
        }
        idle_armed = false;
        if (line == ":q" || line == ":quit" || line == ":exit") break;
        if (line.empty()) continue;
        if (line == ":reset") {
          history.resize(base);
          seq.clear();
          last_text.clear();
          out("(history and context cleared)\n");
          continue;
        }
        if (line.rfind(":set", 0) == 0) {
          std::string key, val;
          const size_t k0 = line.find_first_not_of(' ', 4);
          if (k0 != std::string::npos) {
            const size_t k1 = line.find(' ', k0);
            key = line.substr(k0, k1 == std::string::npos ? std::string::npos : k1 - k0);
            if (k1 != std::string::npos) {
              const size_t v0 = line.find_first_not_of(' ', k1);
              if (v0 != std::string::npos) val = line.substr(v0);
            }
          }
          bool ok = !key.empty() && !val.empty();
          try {
            if (key.empty() && val.empty()) {
              ok = true;  // bare :set shows the settings
            } else if (!ok) {
            } else if (key == "n") {
              n_max = std::stoll(val);
            } else if (key == "temperature") {
              so.temperature = std::stod(val);
              ok = so.temperature >= 0;
            } else if (key == "top_k") {
              so.top_k = std::stoll(val);
              ok = so.top_k >= 0;
            } else if (key == "top_p") {
              so.top_p = std::stod(val);
              ok = so.top_p >= 0 && so.top_p <= 1;
            } else if (key == "min_p") {
              so.min_p = std::stod(val);
              ok = so.min_p >= 0 && so.min_p <= 1;
            } else if (key == "repeat_penalty") {
              so.repetition_penalty = std::stod(val);
              ok = so.repetition_penalty > 0;
            } else if (key == "seed") {
              so.seed = std::stoull(val);
            } else if (key == "think") {
              ok = !raw && parse_bool(val, think);
            } else if (key == "ignore_eos") {
              ok = parse_bool(val, ignore_eos);
            } else {
              ok = false;
            }
          } catch (const std::exception&) {
            ok = false;
          }
          if (ok) seq.set_sampling(so);
          out(ok ? fmt::format("(n {}, temperature {}, top_k {}, top_p {}, min_p {}, repeat_penalty {}, seed {}, "
                               "think {}, ignore_eos {})\n",
                               n_max, so.temperature, so.top_k, so.top_p, so.min_p, so.repetition_penalty, so.seed,
                               think ? "on" : "off", ignore_eos ? "on" : "off")
                 : std::string("(usage: :set n|temperature|top_k|top_p|min_p|repeat_penalty|seed|think|ignore_eos "
                               "VALUE)\n"));
          continue;
        }
        if (line == ":more") {
          if (history.size() == base || history.back().role != "assistant" || !seq.can_continue()) {
            out("(no answer to continue)\n");
            continue;
          }
          TurnStats st;
          GenerationParams gp = turn_params();
          gp.ban_stops_first = last_reason == StopReason::Eos;
          seq.resume(gp);
          const std::string more = answer(false, st).value_or("");
          last_text += more;
          last_reason = st.reason;
          history.back() = assistant_message(last_text);
          continue;
        }
        if (line[0] == ':' && line.size() > 1 && std::isalpha(static_cast<unsigned char>(line[1])) &&
            line.find(' ') == std::string::npos) {
          out("(commands: :q, :reset, :more, :set KEY VALUE)\n");
          continue;
        }

        // A user turn.
        TurnStats st;
        history.push_back({.role = "user", .content = raw ? line + "\n" : line});
        ChatRenderOptions ro;
        ro.enable_thinking = think;
        const std::vector<int32_t> tokens = tm.tok.encode(tm.tmpl.render(history, nullptr, ro), raw);
        if (tokens.empty() || static_cast<int64_t>(tokens.size()) >= ctx) {
          history.pop_back();
          std::fprintf(stderr,
                       "(the conversation would be %zu tokens and the context is %lld: nothing was sent; :reset, or "
                       "restart with a larger --ctx)\n",
                       tokens.size(), static_cast<long long>(ctx));
          continue;
        }
        opened_reasoning = tm.tmpl.opens_reasoning(ro);
        seq.begin(tokens, turn_params());
        const std::string shown = answer(opened_reasoning, st).value_or("");
        last_text = shown;
        last_reason = st.reason;
        history.push_back(assistant_message(shown));
      }
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
