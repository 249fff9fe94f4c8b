#include "cli/text_common.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <random>

#include "core/error.h"

namespace strata::cli {

namespace {
std::atomic<uint64_t> g_sigint{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
void on_sigint(int) { g_sigint.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

void install_sigint_counter(bool once) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | (once ? SA_RESETHAND : 0);
  sigaction(SIGINT, &sa, nullptr);
}

uint64_t sigint_count() { return g_sigint.load(std::memory_order_relaxed); }

void TextFlags::add(CLI::App* cmd) {
  cmd->add_option("-n", n, "Tokens to generate per answer (default: until end of turn or the context is full)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30))
      ->group(kGroupGeneration);
  cmd->add_option("--ctx", ctx, "Context size in tokens (default: min(4096, max_position_embeddings))")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->group(kGroupGeneration);
  cmd->add_option("--stop", stop, "Stop string (repeatable); the text stops before it")->group(kGroupGeneration);
  cmd->add_flag("--ignore-eos", ignore_eos, "Never end at end-of-turn tokens (they are banned from sampling)")
      ->group(kGroupGeneration);
  cmd->add_option("--temperature", temperature,
                  "Sampling temperature, 0 = greedy (default: generation_config.json, else 1)")
      ->check(CLI::Range(0.0, 1e4))
      ->group(kGroupSampling);
  cmd->add_option("--top-k", top_k,
                  "Keep the k most probable tokens, 0 = off (default: generation_config.json, else 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31))
      ->group(kGroupSampling);
  cmd->add_option("--top-p", top_p, "Nucleus sampling mass, 1 = off (default: generation_config.json, else 1)")
      ->check(CLI::Range(0.0, 1.0))
      ->group(kGroupSampling);
  cmd->add_option("--min-p", min_p,
                  "Drop tokens below min-p x the top probability, 0 = off (default: generation_config.json, else 0)")
      ->check(CLI::Range(0.0, 1.0))
      ->group(kGroupSampling);
  cmd->add_option("--repeat-penalty", repeat_penalty,
                  "Repetition penalty over prompt and generated tokens (CTRL/vLLM), 1 = off (default: "
                  "generation_config.json, else 1)")
      ->check(CLI::Range(1e-3, 1e3))
      ->group(kGroupSampling);
  cmd->add_option("--presence-penalty", presence_penalty, "Subtracted once from tokens already generated (OpenAI/vLLM)")
      ->check(CLI::Range(-100.0, 100.0))
      ->capture_default_str()
      ->group(kGroupSampling);
  cmd->add_option("--frequency-penalty", frequency_penalty,
                  "Subtracted per occurrence of a generated token (OpenAI/vLLM)")
      ->check(CLI::Range(-100.0, 100.0))
      ->capture_default_str()
      ->group(kGroupSampling);
  cmd->add_option("--seed", seed, "Sampling seed (default: random)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX))
      ->group(kGroupSampling);
  cmd->add_option("--chat-template", chat_template,
                  "auto: detect the model's template (refuses unknown ones); glm: force the GLM-4.7/GLM-5 dialect; "
                  "glm45: GLM-4.5/4.6; qwen3: Qwen3; deepseek3: DeepSeek-V3; deepseek-r1: DeepSeek-R1; deepseek31: "
                  "DeepSeek-V3.1; raw: no template")
      ->check(CLI::IsMember({"auto", "glm", "glm45", "qwen3", "deepseek3", "deepseek-r1", "deepseek31", "raw"}))
      ->capture_default_str()
      ->group(kGroupTemplate);
  cmd->add_option("--system", system, "System message (default: none)")->group(kGroupTemplate);
  CLI::Option* t = cmd->add_option("--think", think,
                                   "Thinking: on (the model reasons first, shown dimmed) or off (the template's "
                                   "no-think switch: the generation prompt closes the reasoning block)")
                       ->check(CLI::IsMember({"on", "off"}))
                       ->capture_default_str()
                       ->group(kGroupTemplate);
  cmd->add_flag("--no-think", no_think, "The same as --think off")->excludes(t)->group(kGroupTemplate);
}

SamplerOptions TextFlags::sampler_options(const GenerationConfig& g) const {
  SamplerOptions o = default_sampling(g);
  if (temperature >= 0) o.temperature = temperature;
  if (top_p >= 0) o.top_p = top_p;
  if (top_k >= 0) o.top_k = top_k;
  if (min_p >= 0) o.min_p = min_p;
  if (repeat_penalty > 0) o.repetition_penalty = repeat_penalty;
  o.presence_penalty = presence_penalty;
  o.frequency_penalty = frequency_penalty;
  if (seed >= 0) {
    o.seed = static_cast<uint64_t>(seed);
  } else {
    std::random_device rd;
    o.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return o;
}

GenerationParams TextFlags::params(const SamplerOptions& so) const {
  GenerationParams p;
  p.sampling = so;
  p.max_tokens = n;
  p.stop = stop;
  p.ignore_eos = ignore_eos;
  return p;
}

std::string terminal_safe(std::string_view s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
      out += kReplacement;
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      out += kReplacement;  // C1 controls (U+0080..U+009F), e.g. the 8-bit CSI
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace strata::cli
