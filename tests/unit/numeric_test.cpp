#include <gtest/gtest.h>

#include <cmath>

#include <random>
#include <vector>

#include "core/numeric.h"
#include "core/quant.h"

namespace strata::numeric_test {
namespace {

TEST(Numeric, Fp8E4M3DecodesEveryCode) {
  // Known anchors of float8_e4m3fn.
  EXPECT_EQ(fp8e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0xff)));
  // Monotone over the positive codes.
  for (int b = 1; b < 0x7f; ++b) EXPECT_LT(fp8e4m3_to_f32(b - 1), fp8e4m3_to_f32(b)) << b;
}

TEST(Numeric, Bf16RoundTripAndRounding) {
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), h);
  }
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(Numeric, F16Decodes) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}

}  // namespace
}  // namespace strata::numeric_test

namespace strata::numeric_test {
namespace {

// dequantize_row is the definition of what an int8/int4 weight means (the
// attention's absorbed form and f32 activations use it): every byte value,
// every nibble position, per-row and grouped scales, odd widths, on whatever
// SIMD path the machine takes, equals the value-by-value formula.
TEST(Numeric, DequantizeRowIsTheValueByValueFormula) {
  std::mt19937 rng(5);
  for (QuantBits b : {QuantBits::Int8, QuantBits::Int4})
    for (int64_t group : {0, 1, 3, 32, 33, 48, 64, 128})
      for (int64_t cols : {1, 6, 7, 31, 32, 33, 64, 95, 128, 257, 512, 1000}) {
        std::vector<uint8_t> q(static_cast<size_t>(quant_row_bytes(b, cols)));
        for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i < 256 ? i : rng());  // every byte value
        std::vector<float> sc(static_cast<size_t>(quant_groups(cols, group)));
        for (auto& s : sc) s = std::ldexp(static_cast<float>(rng() % 1000 + 1), -static_cast<int>(rng() % 20));
        std::vector<float> out(static_cast<size_t>(cols), NAN);
        dequantize_row(b, group, q.data(), sc.data(), cols, out.data());
        for (int64_t c = 0; c < cols; ++c) {
          const float s = sc[static_cast<size_t>(group > 0 ? c / group : 0)];
          int v = 0;
          if (b == QuantBits::Int8) {
            v = static_cast<int8_t>(q[static_cast<size_t>(c)]);
          } else {
            const uint8_t byte = q[static_cast<size_t>(c / 2)];
            v = ((c % 2 ? byte >> 4 : byte & 0x0f) ^ 8) - 8;
          }
          ASSERT_EQ(out[static_cast<size_t>(c)], static_cast<float>(v) * s)
              << (b == QuantBits::Int8 ? "int8" : "int4") << " group " << group << " cols " << cols << " c " << c;
        }
      }
}

}  // namespace
}  // namespace strata::numeric_test
