// A store in front of another that counts, per layer and expert, the
// batches that used each expert (the dashboard's expert heat) and forwards
// everything else, read-ahead included.
#pragma once
#include <cstdint>
#include <vector>

#include "experts/expert_store.h"

namespace strata {

class CountingExpertStore final : public ExpertStore {
 public:
  // `moe_layers[l]`: layer l has routed experts (n_experts each).
  CountingExpertStore(ExpertStore& inner, const std::vector<bool>& moe_layers, int64_t n_experts);
  void acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) override;
  void begin(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) override;
  size_t next() override { return inner_.next(); }
  size_t ready() const override { return inner_.ready(); }
  void release(int64_t layer) override { inner_.release(layer); }
  int64_t max_batch(int64_t layer) const override { return inner_.max_batch(layer); }
  bool wants_prefetch() const override { return inner_.wants_prefetch(); }
  void prefetch(int64_t layer, std::span<const int32_t> experts) override { inner_.prefetch(layer, experts); }
  ExpertStoreStats stats() const override { return inner_.stats(); }
  ExpertIo io() const override { return inner_.io(); }
  ExpertMemory memory() const override { return inner_.memory(); }
  std::string describe() const override { return inner_.describe(); }
  bool save_usage() const override { return inner_.save_usage(); }

  // Per layer, per expert (empty for dense layers). Only from the thread
  // that runs the forward.
  const std::vector<std::vector<uint64_t>>& usage() const { return usage_; }

 private:
  void count(int64_t layer, std::span<const int32_t> experts);
  ExpertStore& inner_;
  std::vector<std::vector<uint64_t>> usage_;
};

}  // namespace strata
