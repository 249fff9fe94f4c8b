// When a matmul goes to the thread pool (kernels/matmul.cpp), for the code
// that models its cost (strata plan, docs/plan.md).
#pragma once
#include <cstdint>

namespace strata {

// A matmul goes to the pool (when it has 2+ threads) only above this many
// multiply-adds (out x in x nrows); smaller ones run on the caller.
constexpr int64_t kMatmulParallelMadds = 32768;
inline bool matmul_on_pool(int64_t out, int64_t in, int64_t nrows) { return out * in * nrows > kMatmulParallelMadds; }

}  // namespace strata
