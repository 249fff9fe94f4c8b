// Symmetric integer quantization of weight rows: int8 and int4, with one f32
// scale per row (group 0) or per group of `group` input columns.
//
// q = clamp(round_half_even(w / s), -qmax, qmax), s = amax / qmax, where
// qmax is 127 (int8) or 7 (int4). Dequantized w' = q * s, so
// |w - w'| <= s / 2 for every element: the format's stated error bound.
// int4 packs two values per byte, even column in the low nibble.
#pragma once
#include <cstdint>

namespace strata {

enum class QuantBits : uint8_t { Int8 = 8, Int4 = 4 };

inline int64_t quant_groups(int64_t cols, int64_t group) { return group > 0 ? (cols + group - 1) / group : 1; }
inline int64_t quant_row_bytes(QuantBits b, int64_t cols) { return b == QuantBits::Int8 ? cols : (cols + 1) / 2; }
inline int qmax(QuantBits b) { return b == QuantBits::Int8 ? 127 : 7; }

// Quantizes one row of `cols` floats: writes quant_row_bytes() bytes to q and
// quant_groups() scales.
//
// bf16_scales: each scale is first rounded to bf16 (s' = bf16(amax / qmax),
// to nearest even) and the row quantized with s', so the scales can be stored
// in 2 bytes and still dequantize to exactly q * s'. The bound stays
// |w - w'| <= s' / 2: bf16 keeps 8 significant bits, so |s' - s| <= 2^-8 s
// and |w / s'| <= qmax * 256 / 255 < qmax + 1/2 (127.498 for int8): no value
// is clamped. (A scale below bf16's smallest subnormal, amax < 2^-133 * qmax,
// becomes 0 and its group 0: an error of at most that amax.)
void quantize_row(QuantBits b, int64_t group, const float* w, int64_t cols, uint8_t* q, float* scales,
                  bool bf16_scales = false);
// The scalar reference: row back to f32.
void dequantize_row(QuantBits b, int64_t group, const uint8_t* q, const float* scales, int64_t cols, float* out);

}  // namespace strata
