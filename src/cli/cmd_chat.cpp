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
#include <poll.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_common.h"
#include "util/error.h"

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

}  // namespace

void add_chat_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    TextFlags text;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat (:q quit, :reset, :more, :set KEY VALUE)");
  f->engine.add(cmd);
  f->text.add(cmd);
  cmd->callback([f, &run] {
    run = [f]() -> int {
      Engine e = open_engine(f->engine, false);
      const ModelConfig& c = e.model->config;
      const TextModel tm = open_text_model(e, f->engine, f->text, false);
      const int64_t ctx = context_size(c, f->text.ctx);
      const bool raw = tm.tmpl.dialect == ChatDialect::Raw;
      const bool tty_in = ::isatty(STDIN_FILENO) == 1;

      SamplerOptions so = f->text.sampler_options(tm.gen);
      Sampler sampler(c.vocab_size, so);
      Generator g(e, tm, ctx, f->engine.forward_options());
      int64_t n_max = f->text.n;
      bool think = !f->text.no_think, ignore_eos = f->text.ignore_eos;

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

      // Runs one answer from the session's current state; prints the footer.
      auto answer = [&](bool ban_stops_first, TurnStats& st) {
        const ExpertStoreStats before = e.disk ? e.disk->stats() : ExpertStoreStats{};
        StopStrings stops(f->text.stop);
        const uint64_t t_decode = now_ns();
        const std::string shown = g.decode(
            sampler, n_max, stops, ignore_eos, ban_stops_first, [](std::string_view t) { out(terminal_safe(t)); },
            turn_interrupted, st);
        const uint64_t sig_now = sigint_count();
        if (sig_now != sig_seen) {
          if (sig_now - sig_seen >= 2) quit = true;
          sig_seen = sig_now;
          last_sigint_ns = now_ns();
          st.reason = StopReason::Interrupted;
        }
        std::string hit = "experts resident";
        if (e.disk) {
          const ExpertStoreStats& a = e.disk->stats();
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
        return shown;
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
          g.clear();
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
          if (ok) sampler.set_options(so);
          out(ok ? fmt::format("(n {}, temperature {}, top_k {}, top_p {}, min_p {}, repeat_penalty {}, seed {}, "
                               "think {}, ignore_eos {})\n",
                               n_max, so.temperature, so.top_k, so.top_p, so.min_p, so.repetition_penalty, so.seed,
                               think ? "on" : "off", ignore_eos ? "on" : "off")
                 : std::string("(usage: :set n|temperature|top_k|top_p|min_p|repeat_penalty|seed|think|ignore_eos "
                               "VALUE)\n"));
          continue;
        }
        if (line == ":more") {
          if (history.size() == base || history.back().role != "assistant" || !g.can_continue()) {
            out("(no answer to continue)\n");
            continue;
          }
          TurnStats st;
          st.start_ns = now_ns();
          st.reused = static_cast<int64_t>(g.cached().size());
          sampler.reset(g.cached());
          const std::string more = answer(last_reason == StopReason::Eos, st);
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
        st.start_ns = now_ns();
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
        sampler.reset(tokens);
        opened_reasoning = tm.tmpl.opens_reasoning(ro);
        std::string shown;
        if (g.prefill(tokens, turn_interrupted, st)) {
          if (opened_reasoning) out("<think>");
          shown = answer(false, st);
        } else {
          sig_seen = sigint_count();
          last_sigint_ns = now_ns();
          st.reason = StopReason::Interrupted;
          std::fprintf(stderr, "[interrupted during the prompt]\n");
        }
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
