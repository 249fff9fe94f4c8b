#include "text/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace strata {

Sampler::Sampler(int64_t vocab, const SamplerOptions& opts)
    : vocab_(vocab),
      opts_(opts),
      rng_(opts.seed),
      seen_prompt_(static_cast<size_t>(vocab), 0),
      count_(static_cast<size_t>(vocab), 0) {
  touched_.reserve(static_cast<size_t>(vocab));
  cand_.reserve(static_cast<size_t>(vocab));
}

void Sampler::set_options(const SamplerOptions& opts) {
  opts_ = opts;
  rng_.seed(opts.seed);
}

void Sampler::reset(std::span<const int32_t> prompt) {
  for (int32_t id : touched_) {
    seen_prompt_[static_cast<size_t>(id)] = 0;
    count_[static_cast<size_t>(id)] = 0;
  }
  touched_.clear();
  for (int32_t t : prompt) {
    if (t < 0 || t >= vocab_ || seen_prompt_[static_cast<size_t>(t)]) continue;
    seen_prompt_[static_cast<size_t>(t)] = 1;
    touched_.push_back(t);
  }
}

void Sampler::accept(int32_t t) {
  if (t < 0 || t >= vocab_) return;
  const size_t i = static_cast<size_t>(t);
  if (!seen_prompt_[i] && count_[i] == 0) touched_.push_back(t);
  ++count_[i];
}

void Sampler::penalize(std::span<float> logits) const {
  const double rp = opts_.repetition_penalty, pres = opts_.presence_penalty, freq = opts_.frequency_penalty;
  if (rp == 1.0 && pres == 0.0 && freq == 0.0) return;
  for (int32_t id : touched_) {
    const size_t i = static_cast<size_t>(id);
    double l = logits[i];
    if (rp != 1.0) l = l > 0 ? l / rp : l * rp;
    if (count_[i] > 0) l -= pres + freq * count_[i];
    logits[i] = static_cast<float>(l);
  }
}

int32_t Sampler::greedy(std::span<const float> logits) const {
  int64_t best = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(logits.size()); ++i) {
    const float x = logits[static_cast<size_t>(i)];
    if (!(x > -std::numeric_limits<float>::infinity())) continue;  // -inf and NaN
    if (best < 0 || x > logits[static_cast<size_t>(best)]) best = i;
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

bool Sampler::build(std::span<float> logits, std::span<const int32_t> banned) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int32_t b : banned)
    if (b >= 0 && b < static_cast<int64_t>(logits.size())) logits[static_cast<size_t>(b)] = kNegInf;
  penalize(logits);
  if (!(opts_.temperature > 0.0)) return false;
  float mx = kNegInf;
  for (float x : logits)
    if (x > mx) mx = x;
  if (!(mx > kNegInf)) return false;

  const double inv_t = 1.0 / opts_.temperature;
  cand_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (!(x > kNegInf)) continue;
    const double z = (static_cast<double>(x) - mx) * inv_t;
    logits[i] = static_cast<float>(z);  // the tempered logit (relative to the max)
    cand_.push_back({static_cast<int32_t>(i), std::exp(z)});
  }
  const auto better = [](const Cand& a, const Cand& b) { return a.w > b.w || (a.w == b.w && a.id < b.id); };

  if (opts_.top_k > 0 && static_cast<size_t>(opts_.top_k) < cand_.size()) {
    const auto kth = cand_.begin() + (opts_.top_k - 1);
    std::nth_element(cand_.begin(), kth, cand_.end(), better);
    cand_.resize(static_cast<size_t>(opts_.top_k));
    std::sort(cand_.begin(), cand_.end(), better);  // a fixed order for the draw on every platform
  }
  if (opts_.top_p < 1.0) {
    double total = 0;
    for (const Cand& c : cand_) total += c.w;
    const double limit = opts_.top_p * total;
    // Most of the mass usually sits in a few tokens: sort a prefix, grow it
    // only while the mass it holds is short of the limit.
    size_t m = std::min<size_t>(cand_.size(), 64);
    for (;;) {
      std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(m), cand_.end(), better);
      double before = 0;
      size_t keep = 0;
      for (; keep < m; ++keep) {
        if (keep > 0 && before >= limit) break;
        before += cand_[keep].w;
      }
      if (before >= limit || m == cand_.size()) {
        cand_.resize(keep);
        break;
      }
      m = std::min(cand_.size(), m * 4);
    }
  }
  if (opts_.min_p > 0.0) {
    double wmax = 0;
    for (const Cand& c : cand_) wmax = std::max(wmax, c.w);
    const double floor = opts_.min_p * wmax;
    cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [&](const Cand& c) { return c.w < floor; }), cand_.end());
  }
  return !cand_.empty();
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> banned) {
  if (!build(logits, banned)) return greedy(logits);
  double total = 0;
  for (const Cand& c : cand_) total += c.w;
  double u = uniform() * total;
  for (const Cand& c : cand_) {
    u -= c.w;
    if (u < 0) return c.id;
  }
  return cand_.back().id;
}

int32_t Sampler::sample_draft(std::span<float> logits, int32_t /*draft*/, std::span<const int32_t> banned) {
  // For a point-mass draft d the speculative rule (keep d with probability
  // p(d), else draw from p without d) is the same law as one plain draw
  // x ~ p with d kept iff x == d: P(keep) = p(d), and given x != d, x is p
  // restricted to the other tokens, renormalised. Drawing exactly as
  // sample() does (the same single uniform) also keeps the random stream
  // where --spec off leaves it: seeded output does not depend on the drafts.
  return sample(logits, banned);
}

std::vector<std::pair<int32_t, double>> Sampler::distribution(std::span<float> logits,
                                                              std::span<const int32_t> banned) {
  std::vector<std::pair<int32_t, double>> out;
  if (!build(logits, banned)) {
    out.emplace_back(greedy(logits), 1.0);
    return out;
  }
  std::sort(cand_.begin(), cand_.end(),
            [](const Cand& a, const Cand& b) { return a.w > b.w || (a.w == b.w && a.id < b.id); });
  double total = 0;
  for (const Cand& c : cand_) total += c.w;
  for (const Cand& c : cand_) out.emplace_back(c.id, c.w / total);
  return out;
}

// ---------------------------------------------------------------------------

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (s.empty()) continue;
    max_len_ = std::max(max_len_, s.size());
    stops_.push_back(std::move(s));
  }
}

std::string StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  if (stops_.empty()) return std::string(text);
  const size_t old = pending_.size();
  pending_ += text;
  // A match not seen before must end in the new text.
  const size_t from = old >= max_len_ ? old - (max_len_ - 1) : 0;
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t p = pending_.find(s, from);
    if (p < best) {
      best = p;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    std::string out = pending_.substr(0, best);
    pending_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail that is the start of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStrings::flush() {
  if (stopped_) return {};
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace strata
