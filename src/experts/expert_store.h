// The only way the MoE reaches routed experts (ARCHITECTURE.md §3). Per
// layer the forward asks for the union of the experts its rows chose, uses
// them, and releases them; where they live is the store's business.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/weight.h"

namespace strata {

// One MoE layer's read-ahead, for its precision and recall.
struct ExpertLayerStats {
  int64_t layer = 0;
  uint64_t requests = 0, misses = 0;
  uint64_t prefetched = 0;     // experts read ahead (issued)
  uint64_t prefetch_hits = 0;  // requests served by a read-ahead
  // Bytes of read-aheads the layer's request did not use (docs/streaming.md).
  uint64_t prefetch_wasted_bytes = 0;
  // Read-ahead reads that were then asked for; of the requests that needed a
  // read, the share a read-ahead had already made.
  double precision() const { return prefetched ? static_cast<double>(prefetch_hits) / static_cast<double>(prefetched) : 0.0; }
  double recall() const {
    const uint64_t needed = prefetch_hits + misses;
    return needed ? static_cast<double>(prefetch_hits) / static_cast<double>(needed) : 0.0;
  }
};

// What a store counted since it opened.
struct ExpertStoreStats {
  uint64_t requests = 0;  // experts asked for (per layer per batch)
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_read = 0;
  uint64_t read_ns = 0;
  uint64_t prefetched = 0;        // experts read ahead
  uint64_t prefetch_hits = 0;     // requests served by a read-ahead (counted in hits too)
  uint64_t prefetch_wait_ns = 0;  // time acquire() waited for an in-flight read-ahead
  uint64_t prefetch_wasted_bytes = 0;  // bytes read ahead that their layer's request did not use
  uint64_t prefetch_yields = 0;        // times the read-ahead held its queued reads back for demand reads
  uint64_t registered_reads = 0;       // chunk reads into io_uring registered buffers
  // Read-ahead auto: steps run with read-ahead off, and the decisions made
  // after each pair of measuring windows (off: it did not pay).
  uint64_t prefetch_off_steps = 0, prefetch_auto_on = 0, prefetch_auto_off = 0;
  std::vector<ExpertLayerStats> layers;  // MoE layers, in order (empty for a resident store)
  double hit_rate() const { return requests ? static_cast<double>(hits) / static_cast<double>(requests) : 1.0; }
};

// The store's read counters alone (those of stats(), without the per-layer
// detail): cheap enough to take around every forward.
struct ExpertIo {
  uint64_t bytes_read = 0;
  uint64_t read_ns = 0;
};

// Where a store keeps experts (all zero for one that holds every expert resident).
struct ExpertMemory {
  bool on_disk = false;
  uint64_t budget_bytes = 0;   // RAM allowed for cached + pinned experts
  uint64_t pinned_bytes = 0;
  uint64_t cache_bytes = 0;    // LRU capacity
  uint64_t on_disk_bytes = 0;  // every expert, as stored
  const char* policy = "";     // the cache policy ("lru", "lfu"; "mmap": the page cache)
  uint64_t cache_used_bytes = 0;  // of cache_bytes, the slots holding an expert now (mmap: 0, not known)
};

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  // Fills out[i] with expert experts[i] of `layer`, valid until release(layer).
  virtual void acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) = 0;
  virtual void release(int64_t layer) = 0;
  // The streaming form of acquire(): begin() fills out[i] like acquire()
  // and starts reading what is missing (every miss in flight at once); then
  // each next(), called once per expert, returns the index i of one whose
  // bytes are ready -- resident ones first, then in the order reads land --
  // so the caller computes each expert as soon as it can. Results must not
  // depend on that order. The default serves acquire()'s answer in order.
  virtual void begin(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) {
    acquire(layer, experts, out);
    served_ = 0;
  }
  virtual size_t next() { return served_++; }
  // How many more next() calls would return without waiting now (a lower
  // bound; it may exceed those left: the caller clamps). The default serves
  // from memory: all of them.
  virtual size_t ready() const { return SIZE_MAX; }
  // The most experts of `layer` one acquire() may ask for; the MoE splits the
  // union into chunks of this size (each expert is still read once).
  virtual int64_t max_batch(int64_t layer) const { return INT64_MAX; }
  // A hint that `experts` of `layer` will probably be asked for soon: a
  // store may start reading them in the background. Never changes results.
  virtual bool wants_prefetch() const { return false; }
  virtual void prefetch(int64_t layer, std::span<const int32_t> experts) {}

  // Reporting: counters, memory tiers, a start-up line, and persisting what
  // the store learned (routing usage) when the engine closes.
  virtual ExpertStoreStats stats() const { return {}; }
  virtual ExpertIo io() const { return {}; }  // no allocation, no per-layer walk
  virtual ExpertMemory memory() const { return {}; }
  virtual std::string describe() const { return "experts: resident"; }
  virtual bool save_usage() const { return true; }

 protected:
  size_t served_ = 0;  // the default next()'s position
};

// Every expert resident in RAM, straight from the loaded weights
// (experts[layer][expert]; empty for dense layers).
class ResidentExpertStore final : public ExpertStore {
 public:
  explicit ResidentExpertStore(const std::vector<std::vector<MlpWeights>>& experts) : experts_(experts) {}
  void acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) override {
    out.clear();
    for (int32_t e : experts) out.push_back(&experts_[static_cast<size_t>(layer)][static_cast<size_t>(e)]);
  }
  void release(int64_t) override {}

 private:
  const std::vector<std::vector<MlpWeights>>& experts_;
};

}  // namespace strata
