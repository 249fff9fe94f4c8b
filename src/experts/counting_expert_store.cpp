#include "experts/counting_expert_store.h"

namespace strata {

CountingExpertStore::CountingExpertStore(ExpertStore& inner, const std::vector<bool>& moe_layers, int64_t n_experts)
    : inner_(inner) {
  usage_.resize(moe_layers.size());
  for (size_t l = 0; l < moe_layers.size(); ++l)
    if (moe_layers[l]) usage_[l].assign(static_cast<size_t>(n_experts), 0);
}

void CountingExpertStore::count(int64_t layer, std::span<const int32_t> experts) {
  if (layer >= 0 && layer < static_cast<int64_t>(usage_.size())) {
    auto& u = usage_[static_cast<size_t>(layer)];
    for (int32_t e : experts)
      if (e >= 0 && static_cast<size_t>(e) < u.size()) ++u[static_cast<size_t>(e)];
  }
}

void CountingExpertStore::acquire(int64_t layer, std::span<const int32_t> experts,
                                  std::vector<const MlpWeights*>& out) {
  count(layer, experts);
  inner_.acquire(layer, experts, out);
}

void CountingExpertStore::begin(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) {
  count(layer, experts);
  inner_.begin(layer, experts, out);
}

}  // namespace strata
