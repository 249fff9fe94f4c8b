#include "quant/quant.h"

#include <algorithm>
#include <cmath>

namespace strata {

void quantize_row(QuantBits b, int64_t group, const float* w, int64_t cols, uint8_t* q, float* scales) {
  const int64_t g = group > 0 ? group : cols;
  const int qm = qmax(b);
  if (b == QuantBits::Int4) std::fill(q, q + quant_row_bytes(b, cols), uint8_t{0});
  for (int64_t c0 = 0, gi = 0; c0 < cols; c0 += g, ++gi) {
    const int64_t c1 = std::min(cols, c0 + g);
    float amax = 0.0f;
    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[c]));
    const float s = amax / static_cast<float>(qm);
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
  // Groups are 0 (one per row) or multiples of 32, so every int4 group starts
  // on a whole byte. The same one multiply per value as before.
  const int64_t g = group > 0 ? group : cols;
  for (int64_t c0 = 0; c0 < cols; c0 += g) {
    const float s = scales[c0 / g];
    const int64_t e = std::min(cols, c0 + g);
    if (b == QuantBits::Int8) {
      for (int64_t c = c0; c < e; ++c) out[c] = static_cast<float>(static_cast<int8_t>(q[c])) * s;
      continue;
    }
    int64_t c = c0;
    for (; c + 1 < e; c += 2) {
      const uint8_t byte = q[c / 2];
      out[c] = static_cast<float>(((byte & 0x0f) ^ 8) - 8) * s;
      out[c + 1] = static_cast<float>(((byte >> 4) ^ 8) - 8) * s;
    }
    if (c < e) out[c] = static_cast<float>(((q[c / 2] & 0x0f) ^ 8) - 8) * s;
  }
}

}  // namespace strata
