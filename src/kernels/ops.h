// Small per-row operations of the forward pass, each in one fixed order so a
// row's result never depends on its batch.
#pragma once
#include <cmath>
#include <cstdint>

namespace strata {

// out = w * x / sqrt(mean(x^2) + eps); out may alias x.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);
// out = (x - mean) / sqrt(var + eps) * w + b (biased variance); out may alias x.
void layernorm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out);
// Interleaved (GPT-J) rotation of adjacent pairs: x[2i], x[2i+1] by angle i.
void rope_interleaved(float* x, const float* cos, const float* sin, int64_t dim);
// RoPE on (x[i], x[i + dim/2]) pairs (transformers' rotate_half form, the
// GQA families); cos / sin as rope_angles gives them, dim / 2 each.
void rope_half(float* x, const float* cos, const float* sin, int64_t dim);
// cos/sin of pos * theta^(-2i/dim) for i < dim/2, as the reference computes them.
void rope_angles(int64_t pos, double theta, int64_t dim, float* cos, float* sin);
// YaRN: as rope_angles with inv_freq[i] = interp * (1 - e) + extrap * e, where
// extrap = theta^(-2i/dim), interp = 1 / (factor * theta^(2i/dim)) and
// e = 1 - clamp((i - low) / (high - low), 0, 1) (high + 0.001 when equal);
// cos and sin then multiplied by attention_factor. f32 roundings as the
// reference (torch, float32) makes them.
void rope_angles_yarn(int64_t pos, double theta, int64_t dim, double factor, double low, double high,
                      float attention_factor, float* cos, float* sin);
// In-place softmax over n values: the max, exp(x - max) with the sum of the
// exps in double in index order, then each times float(1 / sum). The scalar
// reference of KernelTable::softmax (the forward calls the table's).
void softmax(float* x, int64_t n);
// y[i] = std::exp(x[i]), the scalar reference of KernelTable::exp_f32.
void exp_f32_ref(const float* x, float* y, int64_t n);
// y[i] = the f32 value of IEEE half x[i] (exact), the scalar reference of
// KernelTable::f16_to_f32 (the f16 key cache's reads).
void f16_to_f32_ref(const uint16_t* x, float* y, int64_t n);
// g[i] = silu(g[i]) * u[i], the scalar reference of KernelTable::silu_mul.
void silu_mul_ref(float* g, const float* u, int64_t n);
// Whether an exp kernel gives std::exp's bits on inputs where libm builds
// differ (glibc's FMA and non-FMA expf disagree on exactly two floats, both
// included): the AVX-512 tables take their SIMD exps only where it does,
// i.e. where std::exp is the glibc expf they reproduce.
bool exp_kernel_matches_libm(void (*exp_f32)(const float* x, float* y, int64_t n));

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace strata
