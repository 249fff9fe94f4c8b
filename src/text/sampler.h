// Logits -> next token, and the stop conditions of a generation.
//
// The pipeline, in the order transformers applies its logits warpers:
//   1. penalties on the raw logits (vLLM's / the OpenAI API's definitions):
//      - repetition_penalty r (CTRL): every token seen in the prompt or the
//        generated text has its logit divided by r if positive, multiplied
//        by r if negative;
//      - presence_penalty a and frequency_penalty b: a generated token seen
//        c > 0 times has its logit reduced by a + b*c (generated tokens only);
//   2. temperature T: T == 0 is greedy (argmax; ties to the lowest id);
//      otherwise logits / T and softmax;
//   3. top-k: keep the k most probable (k = 0: off);
//   4. top-p: keep the most probable tokens while the probability mass
//      before them is < p (the smallest set reaching p; p = 1: off);
//   5. min-p: keep tokens with probability >= min_p * the top probability;
//   6. renormalise and draw with a seeded std::mt19937_64 (53-bit uniforms,
//      so the same seed gives the same tokens on every platform).
// Candidates are ordered by probability, then id, so ties are deterministic.
// A Sampler owns all its scratch (sized to the vocabulary once): sampling a
// token does not allocate.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

struct SamplerOptions {
  double temperature = 1.0;         // 0: greedy
  int64_t top_k = 0;                // 0: off
  double top_p = 1.0;               // 1: off
  double min_p = 0.0;               // 0: off
  double repetition_penalty = 1.0;  // 1: off; prompt + generated tokens
  double presence_penalty = 0.0;    // generated tokens
  double frequency_penalty = 0.0;   // generated tokens
  uint64_t seed = 0;
  bool operator==(const SamplerOptions&) const = default;
};

class Sampler {
 public:
  Sampler(int64_t vocab, const SamplerOptions& opts);

  const SamplerOptions& options() const { return opts_; }
  // Changes the options; the RNG restarts from opts.seed.
  void set_options(const SamplerOptions& opts);

  // Starts a generation: `prompt` tokens count for the repetition penalty,
  // generated-token counts restart from zero.
  void reset(std::span<const int32_t> prompt);
  // Records a generated token (all penalties see it).
  void accept(int32_t token);

  // The next token. `logits` (vocab entries) are modified in place
  // (penalties, temperature). `banned` ids are never chosen. If every
  // token is banned or -inf, returns the argmax of the raw logits.
  int32_t sample(std::span<float> logits, std::span<const int32_t> banned = {});

  // Speculative decoding's acceptance rule for a token proposed by a draft
  // that is a point mass (n-gram lookup, a forced token, the MTP head's
  // argmax). The standard rule keeps the draft with probability
  // min(1, p(draft) / 1) = p(draft), else draws from the normalised
  // max(0, p - q), i.e. p without the draft. For a point mass that is
  // exactly one plain draw x ~ p with the draft kept iff x == draft, so this
  // is sample(): the same token, the same random numbers consumed, as
  // without a draft. Seeded output with any --spec equals --spec off token
  // for token, and P(result = x) = p(x) whatever the draft. The result
  // equals `draft` iff it was accepted.
  int32_t sample_draft(std::span<float> logits, int32_t draft, std::span<const int32_t> banned = {});

  // Steps 1-5 without drawing: the kept tokens and their renormalised
  // probabilities, most probable first (for tests and diagnostics).
  std::vector<std::pair<int32_t, double>> distribution(std::span<float> logits, std::span<const int32_t> banned = {});

 private:
  struct Cand {
    int32_t id;
    double w;  // unnormalised probability
  };
  void penalize(std::span<float> logits) const;
  // Fills cand_ with the kept tokens (sorted when a cut needed it); returns
  // false when greedy applies (temperature 0 or nothing finite).
  bool build(std::span<float> logits, std::span<const int32_t> banned);
  int32_t greedy(std::span<const float> logits) const;
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1), 53 bits

  int64_t vocab_;
  SamplerOptions opts_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> seen_prompt_;  // per id: in the prompt
  std::vector<int32_t> count_;        // per id: times generated
  std::vector<int32_t> touched_;      // ids with seen_prompt_ or count_ set
  std::vector<Cand> cand_;
};

// Stop strings over streamed text. push() returns the text that is safe to
// show: text that could be the start of a stop string is held back until the
// next piece decides it. When a stop string appears (possibly spanning many
// pushes), everything before it is returned and stopped() becomes true; the
// stop string and what follows are dropped.
class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops = {});
  std::string push(std::string_view text);
  // End of generation: the held-back text (no stop string completed).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace strata
