// The only way the MoE reaches routed experts (ARCHITECTURE.md §3). Per
// layer the forward asks for the union of the experts its rows chose, uses
// them, and releases them; where they live is the store's business.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace strata {

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  // Fills out[i] with expert experts[i] of `layer`, valid until release(layer).
  virtual void acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) = 0;
  virtual void release(int64_t layer) = 0;
  // The most experts of `layer` one acquire() may ask for; the MoE splits the
  // union into chunks of this size (each expert is still read once).
  virtual int64_t max_batch(int64_t layer) const { return INT64_MAX; }
  // A hint that `experts` of `layer` will probably be asked for soon: a
  // store may start reading them in the background. Never changes results.
  virtual bool wants_prefetch() const { return false; }
  virtual void prefetch(int64_t layer, std::span<const int32_t> experts) {}
};

// Every expert resident in RAM, straight from the loaded weights.
class ResidentExpertStore final : public ExpertStore {
 public:
  explicit ResidentExpertStore(const ModelWeights& w) : w_(w) {}
  void acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) override {
    out.clear();
    for (int32_t e : experts) out.push_back(&w_.experts[static_cast<size_t>(layer)][static_cast<size_t>(e)]);
  }
  void release(int64_t) override {}

 private:
  const ModelWeights& w_;
};

}  // namespace strata
