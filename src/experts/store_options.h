// What opening an expert store needs, for the layers above experts/ (the
// engine, the model loader): where a container's experts are and how the RAM
// cache should behave. The concrete stores stay inside experts/.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "format/container.h"

namespace strata {

// Where a container's routed experts are: its directory and manifest, for
// weight layers [0, n_layers) (an MTP layer that was not loaded is left out).
struct ExpertFiles {
  std::string dir;
  std::shared_ptr<const Manifest> manifest;
  int64_t n_layers = 0;
};

struct ExpertCacheOptions {
  uint64_t ram_bytes = 0;  // budget for cached + pinned experts; 0 = from available memory
  bool pin_all = false;    // pin every expert that fits the budget
  uint64_t pin_bytes = 0;  // pin this much (clamped to the budget)
  bool autopin = true;     // without explicit pins, pin the hottest experts of earlier runs
  bool direct_io = true;
  bool prefetch = true;    // read predicted next-layer experts on an I/O thread
  // Experts over MPI (docs/distributed.md): owned[layer][expert] = 1 for the
  // experts this process serves; only those count towards the pool, are
  // pinned or cached. Empty: every expert.
  std::vector<std::vector<uint8_t>> owned;
};

// The store for a container's experts: read from disk through a RAM cache
// (experts/disk_expert_store.h).
std::unique_ptr<ExpertStore> open_disk_expert_store(const ExpertFiles& files, const ExpertCacheOptions& o);

}  // namespace strata
