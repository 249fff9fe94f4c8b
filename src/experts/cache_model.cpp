#include "experts/cache_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace strata {

StackDistances lru_stack_distances(const RoutingTrace& t, int64_t warmup_tokens) {
  StackDistances d;
  d.hist.assign(static_cast<size_t>(std::max<int64_t>(1, t.n_experts)), 0);
  // Per layer, each expert's last-use tick (0: never). The distance of a
  // request is the number of experts used after its expert's last use.
  std::vector<std::vector<uint64_t>> last(static_cast<size_t>(t.n_layers),
                                          std::vector<uint64_t>(static_cast<size_t>(t.n_experts), 0));
  uint64_t tick = 0;
  for (int64_t tok = 0; tok < t.tokens(); ++tok) {
    const bool counted = tok >= warmup_tokens;
    for (int64_t l = 0; l < t.n_layers; ++l) {
      std::vector<uint64_t>& lu = last[static_cast<size_t>(l)];
      for (int32_t e : t.at(tok, l)) {
        if (e < 0 || e >= t.n_experts) fail("cache model: expert {} outside [0, {})", e, t.n_experts);
        const uint64_t mine = lu[static_cast<size_t>(e)];
        if (counted) {
          ++d.requests;
          if (mine > 0) {
            size_t dist = 0;
            for (uint64_t x : lu) dist += x > mine;
            ++d.hist[dist];
          }
        }
        lu[static_cast<size_t>(e)] = ++tick;
      }
    }
  }
  return d;
}

CacheReplay StackDistances::at(int64_t slots) const {
  CacheReplay r;
  r.requests = requests;
  for (int64_t i = 0; i < slots && i < static_cast<int64_t>(hist.size()); ++i) r.hits += hist[static_cast<size_t>(i)];
  return r;
}

double scaled_hit_rate(const StackDistances& d, int64_t slots, int64_t target_experts) {
  if (slots < 1 || target_experts < 1) fail("cache model: {} slots of {} experts per layer", slots, target_experts);
  if (d.requests == 0) return 1.0;
  const int64_t es = static_cast<int64_t>(d.hist.size());
  if (es == target_experts) return d.at(slots).hit_rate();
  // x trace slots: every distance below floor(x) hits, and the fraction
  // x - floor(x) of the requests at distance floor(x).
  const double x = std::min(static_cast<double>(es), static_cast<double>(slots) * static_cast<double>(es) /
                                                         static_cast<double>(target_experts));
  const int64_t whole = static_cast<int64_t>(std::floor(x));
  double hits = static_cast<double>(d.at(std::max<int64_t>(whole, 0)).hits);
  if (whole < es) hits += (x - static_cast<double>(whole)) * static_cast<double>(d.hist[static_cast<size_t>(whole)]);
  return hits / static_cast<double>(d.requests);
}

RoutingTrace repeat_layers(const RoutingTrace& src, int64_t n_layers) {
  if (src.n_layers < 1 || n_layers < 1) fail("cache model: repeat {} trace layers over {}", src.n_layers, n_layers);
  RoutingTrace t{n_layers, src.n_experts, src.k, {}};
  t.ids.reserve(static_cast<size_t>(src.tokens() * n_layers * src.k));
  for (int64_t tok = 0; tok < src.tokens(); ++tok)
    for (int64_t l = 0; l < n_layers; ++l) {
      const std::span<const int32_t> e = src.at(tok, l % src.n_layers);
      t.ids.insert(t.ids.end(), e.begin(), e.end());
    }
  return t;
}

CacheReplay replay_lru(const RoutingTrace& t, int64_t slots, int64_t warmup_tokens) {
  if (slots < 1) fail("cache model: {} slots per layer (at least 1)", slots);
  return lru_stack_distances(t, warmup_tokens).at(slots);
}

int64_t lru_slots_for_budget(uint64_t budget_bytes, int64_t moe_layers, uint64_t read_bytes, int64_t n_experts) {
  if (moe_layers < 1 || read_bytes == 0) return 1;
  const uint64_t share = budget_bytes / static_cast<uint64_t>(moe_layers);
  return std::clamp<int64_t>(static_cast<int64_t>(share / read_bytes), 1, std::max<int64_t>(1, n_experts));
}

RoutingTrace independent_trace(const std::vector<std::vector<double>>& popularity, int64_t n_layers,
                               int64_t n_experts, int64_t k, int64_t tokens, uint64_t seed) {
  if (n_layers < 1 || n_experts < 1 || k < 1 || k > n_experts || tokens < 0)
    fail("cache model: bad trace shape ({} layers, {} experts, top-{}, {} tokens)", n_layers, n_experts, k, tokens);
  // Per target layer, the weights of its experts.
  std::vector<std::vector<double>> w(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l) {
    std::vector<double>& wl = w[static_cast<size_t>(l)];
    wl.assign(static_cast<size_t>(n_experts), 1.0);
    if (popularity.empty()) continue;
    std::vector<double> src = popularity[static_cast<size_t>(l) % popularity.size()];
    if (src.empty()) continue;
    std::sort(src.begin(), src.end(), std::greater<>());
    const int64_t es = static_cast<int64_t>(src.size());
    for (int64_t j = 0; j < n_experts; ++j) wl[static_cast<size_t>(j)] = std::max(1e-12, src[static_cast<size_t>(j * es / n_experts)]);
  }
  RoutingTrace t{n_layers, n_experts, k, {}};
  t.ids.reserve(static_cast<size_t>(tokens * n_layers * k));
  uint64_t s = seed;
  auto uniform = [&s] {  // splitmix64 -> (0, 1)
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
  };
  std::vector<std::pair<double, int32_t>> keys(static_cast<size_t>(n_experts));
  for (int64_t tok = 0; tok < tokens; ++tok)
    for (int64_t l = 0; l < n_layers; ++l) {
      // Weighted sampling without replacement: the k largest log(w) + Gumbel noise.
      const std::vector<double>& wl = w[static_cast<size_t>(l)];
      for (int64_t j = 0; j < n_experts; ++j)
        keys[static_cast<size_t>(j)] = {std::log(wl[static_cast<size_t>(j)]) - std::log(-std::log(uniform())),
                                        static_cast<int32_t>(j)};
      std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), std::greater<>());
      for (int64_t i = 0; i < k; ++i) t.ids.push_back(keys[static_cast<size_t>(i)].second);
    }
  return t;
}

DecodePrediction predict_decode(const DecodeCost& c, double hit_rate) {
  DecodePrediction p;
  p.hit_rate = std::clamp(hit_rate, 0.0, 1.0);
  const double routed = static_cast<double>(c.moe_layers * c.k);
  const double touched = static_cast<double>(c.dense_bytes) + routed * static_cast<double>(c.expert_bytes);
  p.disk_bytes_per_token = (1.0 - p.hit_rate) * routed * static_cast<double>(c.expert_read_bytes);
  p.compute_s = c.mem_gb_s > 0 ? touched / (c.mem_gb_s * 1e9) : 0.0;
  p.disk_s = c.disk_gb_s > 0 ? p.disk_bytes_per_token / (c.disk_gb_s * 1e9) : 0.0;
  const double total = p.compute_s + p.disk_s;
  p.tok_s = total > 0 ? 1.0 / total : 0.0;
  return p;
}

}  // namespace strata
