#include <gtest/gtest.h>

#include <cmath>

#include "kernels/numeric.h"

namespace strata {
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
}  // namespace strata
