// Pieces shared by the text front ends (run, chat): sampling flags, the
// tokenizer + chat template + generation config of a model directory, and
// the prefill/decode loop over one session.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/common.h"
#include "runtime/session.h"
#include "text/chat_template.h"
#include "text/generation_config.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

namespace strata::cli {

struct TextFlags {
  // Unset (NaN / -1): the model's generation_config.json, else the defaults
  // of SamplerOptions.
  double temperature = -1, top_p = -1, min_p = -1, repeat_penalty = -1;
  int64_t top_k = -1;
  double presence_penalty = 0, frequency_penalty = 0;
  int64_t seed = -1;  // -1: random
  std::vector<std::string> stop;
  int64_t n = -1;   // tokens per answer; -1: until a stop or the context is full
  int64_t ctx = 0;  // 0: min(4096, max_position_embeddings)
  bool no_think = false, ignore_eos = false;
  std::string chat_template = "auto";
  std::string system;
  void add(CLI::App* cmd);
  SamplerOptions sampler_options(const GenerationConfig& g) const;
};

// What turns text into rows and back, for one model directory.
struct TextModel {
  Tokenizer tok;
  GenerationConfig gen;
  ChatTemplate tmpl;
  std::vector<int32_t> stop_ids;  // config.json + generation_config.json eos, GLM turn ends
  bool is_stop(int32_t t) const;
};
// `raw`: no chat template (plain text in, plain text out).
TextModel open_text_model(const Engine& e, const EngineFlags& ef, const TextFlags& f, bool raw);
int64_t context_size(const ModelConfig& c, int64_t flag);

// Makes text safe to print on a terminal: C0/C1 control characters other
// than newline and tab become U+FFFD (a model emitting ESC sequences must not
// drive the user's terminal).
std::string terminal_safe(std::string_view s);

// SIGINT as a counter the loops poll. A signal handler may only touch a
// lock-free atomic, hence the one file-level counter behind these calls.
// `once`: the handler uninstalls itself after the first signal (a second
// Ctrl-C then kills the process, for one-shot commands). SA_RESTART is set,
// so only calls that never restart (poll) see EINTR.
void install_sigint_counter(bool once);
uint64_t sigint_count();

enum class StopReason { Eos, StopString, Length, Context, Interrupted };
const char* stop_reason_name(StopReason r);

struct TurnStats {
  int64_t prefilled = 0, reused = 0, generated = 0;
  uint64_t start_ns = 0, first_token_ns = 0, end_ns = 0;
  StopReason reason = StopReason::Eos;
};

// One sequence: its session and the tokens it holds. Prefill reuses the
// longest common prefix of what the session already holds.
class Generator {
 public:
  Generator(Engine& e, const TextModel& tm, int64_t ctx, const ForwardOptions& fo);

  int64_t capacity() const { return session_.capacity(); }
  // Tokens the session holds (fed to the model).
  const std::vector<int32_t>& cached() const { return cached_; }
  // Forgets everything (:reset).
  void clear();

  // Brings the session to exactly `tokens` (1 <= size <= capacity), leaving
  // the logits of the next token. Prefill runs in chunks; false if
  // `interrupted` said so between chunks (the session then holds a prefix).
  bool prefill(std::span<const int32_t> tokens, const std::function<bool()>& interrupted, TurnStats& st);
  // Continues after the held state for up to n tokens (n < 0: no limit),
  // passing shown text to `emit` as it is decoded (stop strings held back).
  // `ban_stops_first`: the first token may not be a stop token (:more after
  // an end of turn). Returns the text shown (all `emit` got: special tokens
  // included, cut at a stop string).
  std::string decode(Sampler& sampler, int64_t n, StopStrings& stops, bool ignore_eos, bool ban_stops_first,
                     const std::function<void(std::string_view)>& emit, const std::function<bool()>& interrupted,
                     TurnStats& st);
  // Whether decode() can continue: the held state has next-token logits or
  // a sampled token not yet fed.
  bool can_continue() const { return logits_valid_ || pending_.has_value(); }

 private:
  bool feed(int32_t token);  // one decode step; false when the context is full

  Engine& e_;
  const TextModel& tm_;
  ForwardOptions fo_;
  Session session_;
  std::vector<int32_t> cached_;
  std::optional<int32_t> pending_;  // sampled and shown, not yet fed
  std::vector<float> logits_, work_;
  bool logits_valid_ = false;
};

}  // namespace strata::cli
