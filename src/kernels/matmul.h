// The one matrix-multiply interface every projection goes through, with
// kernels chosen by weight format and CPU path (kernels/qgemm.h,
// docs/kernels.md).
//
// Batch invariance: y[r][o] is computed by the same sequence of float
// operations whatever nrows is, whichever thread computes it and whichever
// CPU path runs: every SIMD path reproduces the scalar reference bit for bit.
#pragma once
#include <cstdint>

#include "kernels/cpu_features.h"
#include "model/weight.h"

namespace strata {

class ThreadPool;

// y[r*W.rows + o] = sum_i W[o][i] * x[r*W.cols + i] for r < nrows.
// f32/bf16/fp8: dot16 (below) of the f32 weight row and x's row. int8/int4:
// x's row is quantized to int8 in blocks of 32 columns and multiplied in
// integers (qgemm.h states the arithmetic, docs/kernels.md its error bound).
void matmul(const Weight& W, const float* x, int64_t nrows, float* y, ThreadPool* pool);
// The same on a chosen path (tests, benchmarks); `path` must be supported.
void matmul(const Weight& W, const float* x, int64_t nrows, float* y, ThreadPool* pool, KernelPath path);

// How integer weights meet the activations. Int8 (the default): x is
// quantized per 32-column block and multiplied in integers (W8A8, like
// llama.cpp's Q8_0 activations). F32: each weight row is dequantized to f32
// (Weight::row_f32) and dot16'ed with x, exactly the numbers of the model its
// dequantized weights define (W8A32), and several times slower. A start-up
// setting like force_kernel_path, for tests and quality comparisons.
enum class IntActivations : uint8_t { Int8, F32 };
IntActivations int_activations();
void set_int_activations(IntActivations a);
// Benchmarks: false makes int8 calls of 2+ rows use the single-row kernel
// (the same results bit for bit; the multi-row kernel is only faster).
bool multi_row_kernels();
void set_multi_row_kernels(bool on);

// Fixed-order dot product (16 lanes, lane i % 16 accumulating with fused
// multiply-adds, then a fixed tree): the order every caller relies on.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace strata
