#include "normsvc/kernels/float16.h"

#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

namespace normsvc::kernels {
namespace {

TEST(Float16, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = HalfBitsToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(f))));
      continue;
    }
    EXPECT_EQ(FloatToHalfBits(f), h) << "bits " << bits;
  }
}

TEST(Float16, HalfRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: ties to even.
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);               // rounds to infinity
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
}

TEST(Float16, Bf16MatchesDoubleRoundingOnRandomValues) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1e6f, 1e6f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(rng);
    const float back = Bf16BitsToFloat(FloatToBf16Bits(f));
    // Correct rounding: no bf16 neighbour is closer.
    const uint16_t b = FloatToBf16Bits(f);
    const float up = Bf16BitsToFloat(static_cast<uint16_t>(b + 1));
    const float down = Bf16BitsToFloat(static_cast<uint16_t>(b - 1));
    EXPECT_LE(std::fabs(back - f), std::fabs(up - f));
    EXPECT_LE(std::fabs(back - f), std::fabs(down - f));
  }
}

}  // namespace
}  // namespace normsvc::kernels
