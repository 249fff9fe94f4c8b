#include "experts/cache_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

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

StoreReplay replay_store_lru(const RoutingTrace& t, int64_t slots, int64_t warmup_tokens) {
  if (slots < 0) fail("cache model: {} slots per layer", slots);
  StoreReplay r;
  r.batches.assign(static_cast<size_t>(std::max<int64_t>(1, t.k)) + 1, 0);
  r.tokens = std::max<int64_t>(0, t.tokens() - std::max<int64_t>(0, warmup_tokens));
  if (slots == 0) {  // no cache: every expert read on its own
    r.experts.requests = static_cast<uint64_t>(r.tokens * t.n_layers * t.k);
    r.batches[1] = r.experts.requests;
    return r;
  }
  // Per layer, as the store keeps it: each slot's expert (-1: empty) and
  // last-use tick, expert -> slot, and the slots ordered by (tick, index):
  // the first one not used by the current request is the store's victim.
  struct LayerState {
    std::vector<int32_t> expert;
    std::vector<uint64_t> used;
    std::vector<int32_t> slot_of;
    std::set<std::pair<uint64_t, int32_t>> order;
  };
  std::vector<LayerState> ls(static_cast<size_t>(t.n_layers));
  for (LayerState& s : ls) {
    s.expert.assign(static_cast<size_t>(slots), -1);
    s.used.assign(static_cast<size_t>(slots), 0);
    s.slot_of.assign(static_cast<size_t>(t.n_experts), -1);
    for (int32_t i = 0; i < static_cast<int32_t>(slots); ++i) s.order.insert({0, i});
  }
  uint64_t tick = 0;
  std::vector<int32_t> req;
  for (int64_t tok = 0; tok < t.tokens(); ++tok) {
    const bool counted = tok >= warmup_tokens;
    for (int64_t l = 0; l < t.n_layers; ++l) {
      LayerState& s = ls[static_cast<size_t>(l)];
      const std::span<const int32_t> e = t.at(tok, l);
      req.assign(e.begin(), e.end());
      std::sort(req.begin(), req.end());  // the engine's union of the token's experts, ascending
      for (size_t c0 = 0; c0 < req.size(); c0 += static_cast<size_t>(slots)) {
        const size_t c1 = std::min(req.size(), c0 + static_cast<size_t>(slots));
        ++tick;
        auto touch = [&](int32_t si) {
          s.order.erase({s.used[static_cast<size_t>(si)], si});
          s.used[static_cast<size_t>(si)] = tick;
          s.order.insert({tick, si});
        };
        // 1. Hits keep their slots.
        for (size_t i = c0; i < c1; ++i) {
          const int32_t x = req[i];
          if (x < 0 || x >= t.n_experts || (i > c0 && req[i - 1] == x))
            fail("cache model: expert {} outside [0, {}) or asked for twice", x, t.n_experts);
          const int32_t si = s.slot_of[static_cast<size_t>(x)];
          if (si < 0) continue;
          touch(si);
          if (counted) ++r.experts.hits;
        }
        // 2. Each miss takes the least recently used slot this request does not use.
        uint64_t misses = 0;
        for (size_t i = c0; i < c1; ++i) {
          const int32_t x = req[i];
          if (s.slot_of[static_cast<size_t>(x)] >= 0) continue;
          const int32_t v = s.order.begin()->second;
          if (s.used[static_cast<size_t>(v)] == tick) fail("cache model: a request of more experts than {} slots", slots);
          const int32_t old = s.expert[static_cast<size_t>(v)];
          if (old >= 0) s.slot_of[static_cast<size_t>(old)] = -1;
          s.expert[static_cast<size_t>(v)] = x;
          s.slot_of[static_cast<size_t>(x)] = v;
          touch(v);
          ++misses;
        }
        if (counted) {
          r.experts.requests += c1 - c0;
          ++r.batches[misses];
        }
      }
    }
  }
  return r;
}

double DiskRates::queue_depth(double misses, uint64_t expert_read_bytes) const {
  const double R = static_cast<double>(expert_read_bytes);
  const double in_flight =
      std::min(misses * R, static_cast<double>(io_depth) * std::min(static_cast<double>(io_chunk), R));
  return in_flight / static_cast<double>(read_bytes ? read_bytes : expert_read_bytes);
}

double DiskRates::gb_s(double misses, uint64_t expert_read_bytes) const {
  if (qd_gb_s.empty()) return 0.0;
  const double q = queue_depth(misses, expert_read_bytes);
  if (q <= qd_gb_s.front().first) return qd_gb_s.front().second;
  for (size_t i = 1; i < qd_gb_s.size(); ++i) {
    const auto [q0, r0] = qd_gb_s[i - 1];
    const auto [q1, r1] = qd_gb_s[i];
    if (q <= q1) return r0 + (r1 - r0) * (std::log2(q) - std::log2(q0)) / (std::log2(q1) - std::log2(q0));
  }
  return qd_gb_s.back().second;
}

double DiskRates::read_seconds(double misses, int64_t slots, uint64_t expert_read_bytes) const {
  const double batch = static_cast<double>(std::max<int64_t>(1, slots));
  const double verify = checksum_gb_s > 0 ? static_cast<double>(expert_read_bytes) / (checksum_gb_s * 1e9) : 0.0;
  auto one = [&](double m) {
    const double rate = m > 0 ? gb_s(m, expert_read_bytes) : 0.0;
    return rate > 0 ? m * (static_cast<double>(expert_read_bytes) / (rate * 1e9) + verify) : 0.0;
  };
  const double whole = std::floor(misses / batch);
  return whole * one(batch) + one(misses - whole * batch);
}

DiskRates flat_disk_rate(double gb_s) {
  DiskRates d;
  d.qd_gb_s = {{1.0, gb_s}};
  return d;
}

double disk_seconds_per_token(const StoreReplay& r, const DiskRates& rates, double miss_scale, int64_t slots,
                              uint64_t expert_read_bytes) {
  if (r.tokens == 0) return 0.0;
  double s = 0.0;
  for (size_t m = 1; m < r.batches.size(); ++m)
    if (r.batches[m])
      s += static_cast<double>(r.batches[m]) *
           rates.read_seconds(static_cast<double>(m) * miss_scale, slots, expert_read_bytes);
  return s / static_cast<double>(r.tokens);
}

const StoreReplay& StoreModel::replay(int64_t trace_slots) {
  for (const auto& [n, r] : memo_)
    if (n == trace_slots) return r;
  memo_.emplace_back(trace_slots, replay_store_lru(trace_, trace_slots, warmup_));
  return memo_.back().second;
}

StoreModel::Reading StoreModel::at(int64_t slots, int64_t target_experts, int64_t target_k, const DiskRates& rates,
                                   uint64_t expert_read_bytes) {
  if (slots < 1 || target_experts < 1 || target_k < 1 || trace_.k < 1)
    fail("cache model: {} slots of {} experts per layer, top-{}", slots, target_experts, target_k);
  const int64_t es = trace_.n_experts;
  const double scale = static_cast<double>(target_k) / static_cast<double>(trace_.k);
  auto read = [&](int64_t n) {
    const StoreReplay& r = replay(n);
    return Reading{r.experts.hit_rate(), disk_seconds_per_token(r, rates, scale, slots, expert_read_bytes)};
  };
  if (es == target_experts) return read(std::min(slots, es));
  // x trace slots: linear between the replays at floor(x) and floor(x) + 1.
  const double x = std::min(static_cast<double>(es), static_cast<double>(slots) * static_cast<double>(es) /
                                                         static_cast<double>(target_experts));
  const int64_t whole = static_cast<int64_t>(std::floor(x));
  const Reading a = read(whole);
  if (whole >= es || x == static_cast<double>(whole)) return a;
  const Reading b = read(whole + 1);
  const double f = x - static_cast<double>(whole);
  return Reading{a.hit_rate + f * (b.hit_rate - a.hit_rate), a.disk_s + f * (b.disk_s - a.disk_s)};
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
  const double missed = (1.0 - std::clamp(hit_rate, 0.0, 1.0)) * static_cast<double>(c.moe_layers * c.k) *
                        static_cast<double>(c.expert_read_bytes);
  return predict_decode(c, hit_rate, c.disk_gb_s > 0 ? missed / (c.disk_gb_s * 1e9) : 0.0);
}

DecodeWork decode_work(const ModelConfig& c, int64_t context) {
  DecodeWork w;
  const double n = static_cast<double>(std::max<int64_t>(0, context));
  const double H = static_cast<double>(c.num_attention_heads);
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    if (c.kv_lora_rank > 0) {  // MLA, absorbed: q absorption, scores + sums, output (attention_absorbed.cpp)
      const double kvl = static_cast<double>(c.kv_lora_rank);
      const double keys = c.has_dsa() && c.index_topk > 0 ? std::min(n, static_cast<double>(c.index_topk)) : n;
      w.attention_madds += H * keys * (2 * kvl + static_cast<double>(c.qk_rope_head_dim)) +
                           H * static_cast<double>(c.qk_nope_head_dim + c.v_head_dim) * kvl;
      w.regions += 3;
      if (c.has_dsa() && c.indexer_full(L)) {  // the indexer's region scores every key (indexer.cpp)
        w.regions += 1;
        w.attention_madds += static_cast<double>(c.index_n_heads * c.index_head_dim) * n;
      }
    } else {  // GQA (attention_gqa.cpp): scores and sums per head
      const double hd = static_cast<double>(c.head_dim > 0 ? c.head_dim : c.hidden_size / std::max<int64_t>(1, c.num_attention_heads));
      w.attention_madds += H * n * 2 * hd;
      w.regions += 1;
    }
  }
  return w;
}

DecodePrediction predict_decode(const DecodeCost& c, double hit_rate, double disk_s) {
  DecodePrediction p;
  p.hit_rate = std::clamp(hit_rate, 0.0, 1.0);
  const double routed = static_cast<double>(c.moe_layers * c.k);
  const double touched = static_cast<double>(c.dense_bytes) + routed * static_cast<double>(c.expert_bytes);
  p.disk_bytes_per_token = (1.0 - p.hit_rate) * routed * static_cast<double>(c.expert_read_bytes);
  // Projections on the calling thread: their bytes are in matmul_madd_s (the
  // probe fetched its weights from a working set of the model's size), not
  // streamed by every core.
  // Without a per-multiply-add cost they stay in the bandwidth term.
  const double caller_bytes =
      c.matmul_madd_s <= 0 ? 0.0
                           : c.dense_caller_bytes + (c.experts_on_pool ? 0.0 : routed * static_cast<double>(c.expert_bytes));
  const double caller_madds = c.dense_caller_madds + (c.experts_on_pool ? 0.0 : routed * c.expert_madds);
  p.weights_s = c.mem_gb_s > 0 ? std::max(0.0, touched - caller_bytes) / (c.mem_gb_s * 1e9) : 0.0;
  const double matmuls = static_cast<double>(c.dense_matmuls) + 3.0 * routed;
  const double on_pool = static_cast<double>(c.dense_on_pool) + (c.experts_on_pool ? 3.0 * routed : 0.0);
  p.fixed_s = matmuls * c.matmul_call_s + caller_madds * c.matmul_madd_s +
              (on_pool + static_cast<double>(c.regions)) * c.region_s;
  p.attention_s = c.dot_gmadd_s > 0 ? c.attention_madds / (c.dot_gmadd_s * 1e9) : 0.0;
  p.compute_s = c.calibrated_compute_s > 0 ? c.calibrated_compute_s : p.weights_s + p.fixed_s + p.attention_s;
  p.disk_s = disk_s;
  const double total = p.compute_s + p.disk_s;
  p.tok_s = total > 0 ? 1.0 / total : 0.0;
  return p;
}

}  // namespace strata
