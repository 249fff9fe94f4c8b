// Experts over MPI (docs/distributed.md): which rank serves which routed
// expert, and what every rank must agree on before they work together.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace strata {

// The routed experts of a model as placement sees them.
struct ExpertPool {
  std::vector<int64_t> count;         // per weight layer: experts (0 for dense layers)
  std::vector<uint64_t> bytes;        // per weight layer: bytes of one expert (as the store holds it)
  std::vector<std::vector<uint64_t>> usage;  // per layer, per expert: routed count of earlier runs (empty: none)
};

// The pool of a loaded model (its expert layers, their sizes) and the
// routing usage in dir/usage.json when there is one (a bad file is ignored
// with a warning, as the expert store does).
ExpertPool expert_pool(const Model& m);

struct Placement {
  int ranks = 1;
  bool by_usage = false;                     // weighted by usage.json (else every expert weighs the same)
  std::vector<std::vector<int32_t>> owner;   // [layer][expert] -> rank
  std::vector<int64_t> experts;              // per rank
  std::vector<uint64_t> bytes;               // per rank
  std::vector<double> traffic;               // per rank: share of the routed traffic (usage, or experts)
  // --mpi-replicate: the hottest experts taken out of the partition and
  // served by rank 0 (owner 0; counted in rank 0's experts, bytes, traffic).
  std::vector<std::vector<uint8_t>> replicated;  // [layer][expert] -> 1 when replicated
  int64_t replicated_experts = 0;
  uint64_t replicated_bytes = 0;
  double replicated_traffic = 0.0;           // their share of the routed traffic
};

// Experts hottest first (usage + 1; ties in layer, expert order), each to the
// rank whose load relative to its share of the total budget is lowest (ties:
// the lower rank): every rank's share of the traffic follows its budget. With
// no usage and equal budgets this is round-robin in layer, expert order.
// `replicate` > 0: the `replicate` hottest experts (same order) go to rank 0
// outside that balance -- rank 0 computes every row anyway, so they need no
// exchange -- and the rest are balanced as above, the replicated ones on top
// of rank 0's share: rank 0 serves more traffic than without them
// (docs/distributed.md, "Replicating the hottest experts").
Placement place_experts(const ExpertPool& pool, const std::vector<uint64_t>& budgets, int64_t replicate = 0);

// owned[layer][expert] = 1 for the experts `rank` serves (ExpertCacheOptions::owned).
std::vector<std::vector<uint8_t>> owned_by(const Placement& p, int rank);

// What two ranks must share to work together: a container's files (names,
// sizes, XXH3-64) and config; a checkpoint's config and safetensors files
// (names and sizes). Independent of the directory's path.
uint64_t model_fingerprint(const Model& m);
// The same for a model directory without loading it (a container's
// manifest.json, a checkpoint's config.json and the safetensors' sizes): equal
// to model_fingerprint of the model loaded from `dir`.
uint64_t model_fingerprint(const std::string& dir);

}  // namespace strata
