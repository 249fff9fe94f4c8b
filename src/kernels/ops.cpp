#include "kernels/ops.h"

#include <algorithm>
#include <cstring>

#include "core/numeric.h"

namespace strata {

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * r);
}

void layernorm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out) {
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const double r = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>((x[i] - mean) * r) * w[i] + b[i];
}

void rope_interleaved(float* x, const float* cos, const float* sin, int64_t dim) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cos[i] - b * sin[i];
    x[2 * i + 1] = a * sin[i] + b * cos[i];
  }
}

void rope_half(float* x, const float* cos, const float* sin, int64_t dim) {
  const int64_t h = dim / 2;
  for (int64_t i = 0; i < h; ++i) {
    const float a = x[i], b = x[i + h];
    x[i] = a * cos[i] - b * sin[i];
    x[i + h] = b * cos[i] + a * sin[i];
  }
}

void rope_angles(int64_t pos, double theta, int64_t dim, float* cos, float* sin) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    // inv_freq = 1 / theta^(2i/dim) rounded as the reference (torch, float32)
    // rounds it: exponent, power and reciprocal each to f32. One rounding of
    // the exact reciprocal instead differs by 1 ulp in about a third of the
    // frequencies, and the angle error that makes grows with the position.
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), e));
    const float inv_freq = 1.0f / power;
    const float angle = static_cast<float>(pos) * inv_freq;
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void rope_angles_yarn(int64_t pos, double theta, int64_t dim, double factor, double low, double high,
                      float attention_factor, float* cos, float* sin) {
  const float lo = static_cast<float>(low);
  const float span = static_cast<float>(high == low ? high + 0.001 - low : high - low);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), e));
    const float extrap = 1.0f / power;
    const float interp = 1.0f / (static_cast<float>(factor) * power);
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of the unscaled (extrapolated) frequency
    const float inv_freq = interp * (1.0f - keep) + extrap * keep;
    const float angle = static_cast<float>(pos) * inv_freq;
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
  }
}

void softmax(float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void exp_f32_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void f16_to_f32_ref(const uint16_t* x, float* y, int64_t n) {
  // f16_to_f32's values by integer operations (no ldexp): a normal half's
  // exponent rebiased, a subnormal one's integer times 2^-24 (exact),
  // infinities and NaNs with their payload shifted into place.
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = x[i], sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t u;
    if (em >= 0x7c00u) {
      u = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
    } else if (em >= 0x400u) {
      u = sign | ((em << 13) + (112u << 23));
    } else {
      const float f = static_cast<float>(em) * 0x1p-24f;
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
    std::memcpy(y + i, &u, 4);
  }
}

void silu_mul_ref(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = silu(g[i]) * u[i];
}

bool exp_kernel_matches_libm(void (*exp_f32)(const float* x, float* y, int64_t n)) {
  const float x[] = {0x1.04845ep+5f, -0x1.f8cbb2p+5f, 0.0f, -0.0f,   1.0f,    -1.0f,  0.5f,    -20.25f,
                     -87.5f,         88.5f,           89.0f, -104.0f, -100.0f, 1e-8f, -1e-30f, -3.75f};
  constexpr int64_t n = sizeof x / sizeof x[0];
  float y[n];
  exp_f32(x, y, n);
  for (int64_t i = 0; i < n; ++i) {
    const float want = std::exp(x[i]);
    if (std::memcmp(&want, &y[i], sizeof want) != 0) return false;
  }
  return true;
}

}  // namespace strata
