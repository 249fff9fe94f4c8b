// Pieces shared by the text front ends (run, chat, serve): sampling flags,
// terminal-safe output, Ctrl-C. Generation itself is the library's
// (runtime/generation.h).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/common.h"
#include "runtime/generation.h"
#include "runtime/text_model.h"

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
  std::string think = "on";  // on | off (--think)
  bool no_think = false, ignore_eos = false;
  bool thinking() const { return !no_think && think != "off"; }
  std::string chat_template = "auto";
  std::string system;
  void add(CLI::App* cmd);
  SamplerOptions sampler_options(const GenerationConfig& g) const;
  // An answer's parameters from these flags (n, stop strings, ignore_eos).
  GenerationParams params(const SamplerOptions& so) const;
};

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

}  // namespace strata::cli
