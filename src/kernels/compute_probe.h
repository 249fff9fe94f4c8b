// The costs of a decoded token that memory bandwidth does not capture,
// measured with the engine's own kernels and thread pool (strata doctor,
// strata plan; docs/plan.md "Time per token"): a projection small enough to
// run on the calling thread, an empty parallel region, and the f32
// dot-product rate attention runs at.
#pragma once
#include <cstdint>

namespace strata {

struct ComputeProbe {
  int threads = 0;
  uint64_t working_set_bytes = 0;  // the matrices the projection probe cycles through
  // A single-row int8 matmul below kMatmulParallelMadds (kernels/matmul_pool.h:
  // run on the caller), its matrix the next of many filling the working set
  // (as a token walks through a model's weights), timed at 32 x 256 and
  // 128 x 256 and fitted as call + madd x multiply-adds: the call (quantizing
  // the activations, the kernel's set-up) and each multiply-add with its
  // weight byte fetched from where a working set of that size lives.
  double matmul_call_s = 0.0;
  double matmul_madd_s = 0.0;
  // One parallel region with nothing to do: a wake and a join of the pool
  // (what a projection on the pool, and each of attention's regions, adds).
  double region_s = 0.0;
  // dot16 over f32 rows held in cache on one thread, times `threads`: the
  // rate of attention's per-key work (scores and the weighted sum) if the
  // threads scale, 1e9 multiply-adds per second.
  double dot_gmadd_s = 0.0;
  double seconds = 0.0;  // the probe's own wall time
};

// Runs the measurements for about `seconds` in all, each the median of its
// batches. threads < 1: 1. working_set_bytes: at least the two probe
// matrices, at most 256 MiB.
ComputeProbe probe_compute(int threads, double seconds, uint64_t working_set_bytes);

}  // namespace strata
