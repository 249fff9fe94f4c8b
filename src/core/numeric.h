// Scalar conversions between the storage formats of checkpoint weights and
// f32. These are the references every vectorised conversion is tested against.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace strata {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN kept NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// IEEE half precision, round to nearest even, NaN kept NaN, and saturating:
// a magnitude that would round past 65504 (the largest finite half),
// infinity included, becomes +-65504 -- a cached key is never infinite.
// Subnormal halves are produced (no flush to zero). The one f32 -> f16
// conversion of the f16 key cache (model/session.h): scalar on every kernel
// path, so every path stores the same bits.
inline uint16_t f32_to_f16_sat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477fe000u) return static_cast<uint16_t>(sign | 0x7bffu);  // >= 65504: saturate
  if (a >= 0x38800000u) {  // normal half: rebias the exponent, round 23 -> 10 mantissa bits
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);  // a carry into the exponent is the right result
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 itself: ties to even)
  // Subnormal half: round(|f| * 2^24) = round(m * 2^(e - 126)), shift 14..24.
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 0x400: the smallest normal, also right
  return static_cast<uint16_t>(sign | q);
}

// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities,
// S.1111.111 is NaN; max finite 448.
inline float fp8e4m3_to_f32(uint8_t b) {
  const uint32_t sign = b >> 7, exp = (b >> 3) & 0xfu, man = b & 0x7u;
  float v;
  if (exp == 0xf && man == 0x7)
    v = NAN;
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -9);
  else
    v = std::ldexp(static_cast<float>(man | 0x8u), static_cast<int>(exp) - 10);
  return sign ? -v : v;
}

}  // namespace strata
