// The one matrix-multiply interface every projection goes through. Later
// kernels (int8/int4, SIMD, AMX) plug in here, chosen by weight format.
//
// Batch invariance: y[r][o] is computed by the same sequence of float
// operations whatever nrows is and whichever thread computes it.
#pragma once
#include <cstdint>

#include "model/weight.h"

namespace strata {

class ThreadPool;

// y[r*W.rows + o] = sum_i W[o][i] * x[r*W.cols + i] for r < nrows.
void matmul(const Weight& W, const float* x, int64_t nrows, float* y, ThreadPool* pool);

// Fixed-order dot product (16 lanes, then a fixed tree): the scalar reference
// order that every caller relies on.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace strata
