#include "core/quant.h"

#include <algorithm>
#include <cmath>

#include "core/numeric.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata {

namespace {

#if defined(__x86_64__)
// 2 * pairs int4 values of one group: the same floats as the portable loop
// below (sign-extended nibble, converted, times s), 32 a step.
__attribute__((target("avx512f,avx512bw"))) int64_t dequant_int4_avx512(const uint8_t* qb, int64_t pairs, float s,
                                                                          float* o) {
  const __m512 sv = _mm512_set1_ps(s);
  const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i i1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  int64_t i = 0;
  for (; i + 16 <= pairs; i += 16) {
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + i)));
    const __m512i lo = _mm512_srai_epi32(_mm512_slli_epi32(v, 28), 28), hi = _mm512_srai_epi32(v, 4);
    _mm512_storeu_ps(o + 2 * i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutex2var_epi32(lo, i0, hi)), sv));
    _mm512_storeu_ps(o + 2 * i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutex2var_epi32(lo, i1, hi)), sv));
  }
  return i;
}
const bool kHaveAvx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#endif

}  // namespace

void quantize_row(QuantBits b, int64_t group, const float* w, int64_t cols, uint8_t* q, float* scales,
                  bool bf16_scales) {
  const int64_t g = group > 0 ? group : cols;
  const int qm = qmax(b);
  if (b == QuantBits::Int4) std::fill(q, q + quant_row_bytes(b, cols), uint8_t{0});
  for (int64_t c0 = 0, gi = 0; c0 < cols; c0 += g, ++gi) {
    const int64_t c1 = std::min(cols, c0 + g);
    float amax = 0.0f;
    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[c]));
    float s = amax / static_cast<float>(qm);
    if (bf16_scales) s = bf16_to_f32(f32_to_bf16(s));
    scales[gi] = s;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t c = c0; c < c1; ++c) {
      int v = static_cast<int>(std::nearbyint(w[c] * inv));
      v = std::clamp(v, -qm, qm);
      if (b == QuantBits::Int8) {
        q[c] = static_cast<uint8_t>(static_cast<int8_t>(v));
      } else {
        const uint8_t nib = static_cast<uint8_t>(v) & 0x0f;
        q[c / 2] |= (c % 2 == 0) ? nib : static_cast<uint8_t>(nib << 4);
      }
    }
  }
}

void dequantize_row(QuantBits b, int64_t group, const uint8_t* q, const float* scales, int64_t cols, float* out) {
  // Group by group, so the inner loops have no division and vectorise (the
  // attention's absorbed form dequantizes kv_b rows with this every token).
  // The same one multiply per value as before. Containers strata writes use
  // groups 0, 32, 64 or 128; an odd int4 group (another writer's container)
  // starts groups mid-byte and takes the value-by-value loop.
  const int64_t g = group > 0 ? group : cols;
  if (b == QuantBits::Int4 && g % 2 != 0 && g != cols) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = q[c / 2];
      out[c] = static_cast<float>(((c % 2 ? byte >> 4 : byte & 0x0f) ^ 8) - 8) * scales[c / g];
    }
    return;
  }
  for (int64_t c0 = 0; c0 < cols; c0 += g) {
    const float s = scales[c0 / g];
    const int64_t e = std::min(cols, c0 + g);
    if (b == QuantBits::Int8) {
      for (int64_t c = c0; c < e; ++c) out[c] = static_cast<float>(static_cast<int8_t>(q[c])) * s;
      continue;
    }
    // Nibbles sign-extended by shifts (the same values as ((n ^ 8) - 8)),
    // written as a loop over bytes so it vectorises.
    const uint8_t* qb = q + c0 / 2;
    float* o = out + c0;
    const int64_t pairs = (e - c0) / 2;
    int64_t i0 = 0;
#if defined(__x86_64__)
    if (kHaveAvx512) i0 = dequant_int4_avx512(qb, pairs, s, o);
#endif
    for (int64_t i = i0; i < pairs; ++i) {
      const int8_t v = static_cast<int8_t>(qb[i]);
      o[2 * i] = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(qb[i] << 4)) >> 4) * s;
      o[2 * i + 1] = static_cast<float>(v >> 4) * s;
    }
    if (c0 + 2 * pairs < e) out[e - 1] = static_cast<float>(((q[(e - 1) / 2] & 0x0f) ^ 8) - 8) * s;
  }
}

}  // namespace strata
