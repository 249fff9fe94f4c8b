// A model of the expert cache for `strata plan` (docs/plan.md): replay a
// routing trace through a per-layer LRU of a given number of slots and count
// hits, and turn a hit rate into predicted decode speed from the bytes a
// token touches, memory bandwidth and disk throughput. Pure arithmetic: no
// I/O, no clocks.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace strata {

// The experts each token chose: for token t and MoE layer l, `k` distinct ids
// in [0, n_experts) at ids[(t * n_layers + l) * k ...].
struct RoutingTrace {
  int64_t n_layers = 0, n_experts = 0, k = 0;
  std::vector<int32_t> ids;
  int64_t tokens() const { return n_layers * k > 0 ? static_cast<int64_t>(ids.size()) / (n_layers * k) : 0; }
  std::span<const int32_t> at(int64_t token, int64_t layer) const {
    return {ids.data() + (token * n_layers + layer) * k, static_cast<size_t>(k)};
  }
};

struct CacheReplay {
  uint64_t requests = 0, hits = 0;
  double hit_rate() const { return requests ? static_cast<double>(hits) / static_cast<double>(requests) : 1.0; }
};

// LRU stack distances of a trace: for each counted request, how many
// distinct experts of its layer were used since it was last used (an LRU of
// more slots than that hits; the first use of an expert never hits). LRU is
// a stack algorithm, so one pass gives the hit rate of every cache size.
// The first `warmup_tokens` tokens are replayed but not counted.
struct StackDistances {
  std::vector<uint64_t> hist;  // hist[d]: counted requests at distance d (d < n_experts)
  uint64_t requests = 0;       // counted requests, first uses included
  CacheReplay at(int64_t slots) const;
};
StackDistances lru_stack_distances(const RoutingTrace& trace, int64_t warmup_tokens);

// The hit rate of `slots` LRU slots per layer on a target of `target_experts`
// experts per layer, read from stack distances of a trace of hist.size()
// experts per layer: the target keeps the same fraction of a layer's experts
// cached, i.e. slots * E_trace / E_target trace slots, linear between whole
// slots (docs/plan.md "Recorded traces"). Equal counts: at(slots).
double scaled_hit_rate(const StackDistances& d, int64_t slots, int64_t target_experts);

// A trace over `n_layers` MoE layers from one over fewer or more: target
// layer l replays source layer l mod src.n_layers (experts and top-k kept).
RoutingTrace repeat_layers(const RoutingTrace& src, int64_t n_layers);

// Each layer keeps the `slots` most recently used experts (an expert used by
// a token counts as used when that token asks for it). The first
// `warmup_tokens` tokens fill the cache and are not counted.
CacheReplay replay_lru(const RoutingTrace& trace, int64_t slots, int64_t warmup_tokens);

// The LRU slots per MoE layer the disk store gives a RAM budget without
// pinned experts: the budget split evenly over the MoE layers, in whole
// experts as read (`read_bytes`, the blob rounded up to 4096), at least one
// and at most every expert (experts/disk_expert_store.cpp).
int64_t lru_slots_for_budget(uint64_t budget_bytes, int64_t moe_layers, uint64_t read_bytes, int64_t n_experts);

// A trace of `tokens` tokens for a model of `n_layers` MoE layers of
// `n_experts` experts, top-`k`, each token's choice drawn independently
// (the independent reference model) with probabilities from `popularity`:
// target layer l uses source layer l mod popularity.size(); a source layer
// of E_s experts maps onto E_t experts by its sorted (descending) popularity,
// target expert j taking the source's rank floor(j * E_s / E_t). Each token
// draws k distinct experts, weighted, without replacement. Deterministic in
// `seed`. Empty `popularity`: uniform.
RoutingTrace independent_trace(const std::vector<std::vector<double>>& popularity, int64_t n_layers,
                               int64_t n_experts, int64_t k, int64_t tokens, uint64_t seed);

// What one decoded token costs.
struct DecodeCost {
  uint64_t dense_bytes = 0;   // resident weight bytes one token reads (attention, dense MLP, router, shared, head)
  uint64_t expert_bytes = 0;  // one routed expert's weight bytes (computed on)
  uint64_t expert_read_bytes = 0;  // one routed expert as read from disk (4096-aligned)
  int64_t moe_layers = 0, k = 0;
  double mem_gb_s = 0.0;   // memory read bandwidth, 1e9 B/s
  double disk_gb_s = 0.0;  // expert-read throughput, 1e9 B/s
};

struct DecodePrediction {
  double hit_rate = 0.0;
  double disk_bytes_per_token = 0.0;
  double compute_s = 0.0;  // bytes touched / memory bandwidth
  double disk_s = 0.0;     // bytes missed / disk throughput
  double tok_s = 0.0;      // 1 / (compute_s + disk_s): no overlap of reads with compute
};

DecodePrediction predict_decode(const DecodeCost& c, double hit_rate);

}  // namespace strata
