// A model of the expert cache for `strata plan` (docs/plan.md): replay a
// routing trace through a per-layer LRU of a given number of slots and count
// hits, and turn a hit rate into predicted decode speed from the bytes a
// token touches, memory bandwidth and disk throughput. Pure arithmetic: no
// I/O, no clocks.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/config.h"

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

// The disk store's own rule, request by request (DiskExpertStore::begin with
// LRU, no pinned experts, no read-ahead): a token's experts of a layer, as
// the engine asks for them (sorted, in batches of at most `slots`: the
// store's max_batch), form one request; its hits are marked used first, then
// each miss (in order) takes the slot of the least recently used expert this
// request does not use (an empty slot first; among equals the lowest slot,
// as the store's scan does). So a miss never evicts an expert the same token
// needs, unlike replay_lru's one-by-one replay; the hits equal the store's
// (PlanSizes.StoreModelMatchesDiskStore). `slots` 0: no cache, every
// expert a miss, batches of one.
struct StoreReplay {
  CacheReplay experts;            // counted expert requests and hits
  int64_t tokens = 0;             // counted tokens
  std::vector<uint64_t> batches;  // batches[m]: counted store requests (begin() calls) with m misses
};
StoreReplay replay_store_lru(const RoutingTrace& trace, int64_t slots, int64_t warmup_tokens);

// Random-read throughput as strata doctor measures it (reads of `read_bytes`
// at several queue depths), read at the bytes the store keeps in flight for
// a request's misses: the store reads a request's misses together, in chunks
// of `io_chunk` with at most `io_depth` chunks in flight (store_options.h),
// i.e. min(misses x expert, io_depth x min(io_chunk, expert)) bytes; that is
// taken to go as fast as the same bytes in flight in the probe's reads,
// queue depth q = bytes / read_bytes, interpolated linearly in log2(q)
// between the measured depths and held at the ends (docs/plan.md "Disk").
struct DiskRates {
  std::vector<std::pair<double, double>> qd_gb_s;  // (queue depth, 1e9 B/s), ascending depth
  uint64_t read_bytes = 0;                         // the probe's read (0: one expert as the store reads it)
  int io_depth = 16;
  uint64_t io_chunk = 1u << 20;
  // The store's CPU time per miss besides the read: XXH3 over the expert as
  // it lands, from memory (probe_checksum), 1e9 B/s; 0: not counted. Added
  // to the read time of every miss, no overlap (the waiting thread hashes).
  double checksum_gb_s = 0.0;
  // The queue depth of the probe equivalent to reading `misses` experts of
  // `expert_read_bytes` together, and the rate there.
  double queue_depth(double misses, uint64_t expert_read_bytes) const;
  double gb_s(double misses, uint64_t expert_read_bytes) const;
  // Seconds to read `misses` experts asked for together, in store requests
  // of at most `slots` experts (max_batch), and to verify them.
  double read_seconds(double misses, int64_t slots, uint64_t expert_read_bytes) const;
};
DiskRates flat_disk_rate(double gb_s);

// Disk seconds per counted token of a store replay: each request's misses
// (times `miss_scale`, for a trace of another top-k) read as above.
double disk_seconds_per_token(const StoreReplay& r, const DiskRates& rates, double miss_scale, int64_t slots,
                              uint64_t expert_read_bytes);

// Hit rate and disk seconds per token of `slots` slots per layer of a target
// of `target_experts` experts and top-`target_k` per layer, from store
// replays of a trace of `trace.n_experts` experts, top-`trace.k`: the target
// keeps the same fraction of a layer's experts cached, i.e. slots x E_trace /
// E_target trace slots, linear between whole slots (docs/plan.md "Recorded
// traces"); a request's misses scale by target_k / trace k. Equal shapes:
// exactly replay_store_lru at `slots`. Replays are kept per slot count.
class StoreModel {
 public:
  StoreModel(const RoutingTrace& trace, int64_t warmup_tokens) : trace_(trace), warmup_(warmup_tokens) {}
  struct Reading {
    double hit_rate = 0.0, disk_s = 0.0;
  };
  Reading at(int64_t slots, int64_t target_experts, int64_t target_k, const DiskRates& rates,
             uint64_t expert_read_bytes);
  const StoreReplay& replay(int64_t trace_slots);

 private:
  const RoutingTrace& trace_;
  int64_t warmup_;
  std::vector<std::pair<int64_t, StoreReplay>> memo_;
};

// A trace over `n_layers` MoE layers from one over fewer or more: target
// layer l replays source layer l mod src.n_layers (experts and top-k kept).
RoutingTrace repeat_layers(const RoutingTrace& src, int64_t n_layers);

// Each layer keeps the `slots` most recently used experts, a token's experts
// replayed one after another (so a miss may evict an expert the same token
// asks for next; plan uses replay_store_lru, the store's rule). The first
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
  // The fixed part (all 0: bandwidth only, the model before it).
  int64_t dense_matmuls = 0;    // projections of the resident part one token runs (the converter's layout)
  int64_t dense_on_pool = 0;    // of them, those large enough for the pool (kernels/matmul_pool.h)
  double dense_caller_madds = 0.0;   // multiply-adds of the others (run on the calling thread)
  double dense_caller_bytes = 0.0;   // and their weight bytes
  bool experts_on_pool = false;      // a routed expert's matrices are large enough for the pool
  double expert_madds = 0.0;         // one routed expert's multiply-adds (its 3 matrices)
  int64_t regions = 0;          // other parallel regions one token runs (DecodeWork)
  double attention_madds = 0.0;  // attention's multiply-adds at the context (DecodeWork)
  double matmul_call_s = 0.0;   // ComputeProbe: one projection's cost besides its multiply-adds
  double matmul_madd_s = 0.0;   // ComputeProbe: a multiply-add on the calling thread, its weight fetched
  double region_s = 0.0;        // ComputeProbe: one empty parallel region
  double dot_gmadd_s = 0.0;     // ComputeProbe: attention's rate, 1e9 multiply-adds/s
  // Measured compute per token (plan --calibrate) in place of the three
  // modelled terms (which are still reported); 0: modelled.
  double calibrated_compute_s = 0.0;
};

// Attention's share of what one decoded token runs besides streaming
// weights, from the config (the projections are counted from the
// converter's layout: every matrix of the resident part but the embedding
// and MLA's kv_b, which attention applies per head, plus 3 per routed
// expert): its parallel regions, and its multiply-adds with `context` keys in
// the cache. Per MLA layer (attention_absorbed.cpp): 3 regions; scores and
// sums over min(context, index_topk) keys (DSA) of H heads, kv_lora + rope +
// kv_lora per key; kv_b's absorption of the query and the output, H x (nope +
// v) x kv_lora; on the indexer's full layers 1 region and H_i x D_i per key of
// the whole context. GQA: 1 region, H x 2 x head_dim per key.
struct DecodeWork {
  int64_t regions = 0;
  double attention_madds = 0.0;
};
DecodeWork decode_work(const ModelConfig& c, int64_t context);

struct DecodePrediction {
  double hit_rate = 0.0;
  double disk_bytes_per_token = 0.0;
  double compute_s = 0.0;    // weights_s + fixed_s + attention_s
  double weights_s = 0.0;    // bytes the pool's projections touch / memory bandwidth
  double fixed_s = 0.0;      // projections x matmul_call_s + caller madds x matmul_madd_s
                             // + (projections on the pool + regions) x region_s
  double attention_s = 0.0;  // attention_madds / dot_gmadd_s
  double disk_s = 0.0;       // bytes missed / disk throughput
  double tok_s = 0.0;        // 1 / (compute_s + disk_s): no overlap of reads with compute
};

// disk_s = the bytes missed / c.disk_gb_s (one rate at every queue depth).
DecodePrediction predict_decode(const DecodeCost& c, double hit_rate);
// With the disk seconds per token given (disk_seconds_per_token, StoreModel).
DecodePrediction predict_decode(const DecodeCost& c, double hit_rate, double disk_s);

}  // namespace strata
