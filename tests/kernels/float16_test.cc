#include "normsvc/kernels/float16.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

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

// The bf16 value `steps` representable values above (or below) `b`, in the
// order of the values: -0 and +0 are one point, so the neighbours of a zero
// are the smallest subnormals of either sign (bits b - 1 of +0 would be a
// NaN).
float Bf16Neighbour(uint16_t b, int steps) {
  const int magnitude = b & 0x7fff;
  const int key = ((b & 0x8000) != 0 ? -magnitude : magnitude) + steps;
  const uint16_t bits = static_cast<uint16_t>(key < 0 ? (0x8000 | -key) : key);
  return Bf16BitsToFloat(bits);
}

TEST(Float16, Bf16MatchesDoubleRoundingOnRandomValues) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1e6f, 1e6f);
  // Zeros and the values next to them, which the uniform draw rarely hits
  // (a draw of exactly 0 once made the neighbour below +0 a NaN).
  std::vector<float> values = {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-30f, -1e-30f};
  for (int i = 0; i < 100000; ++i) values.push_back(dist(rng));
  for (const float f : values) {
    const uint16_t b = FloatToBf16Bits(f);
    const float back = Bf16BitsToFloat(b);
    // Correct rounding: no bf16 neighbour is closer.
    const float up = Bf16Neighbour(b, 1);
    const float down = Bf16Neighbour(b, -1);
    ASSERT_FALSE(std::isnan(up) || std::isnan(down)) << f;
    EXPECT_LE(std::fabs(back - f), std::fabs(up - f)) << f;
    EXPECT_LE(std::fabs(back - f), std::fabs(down - f)) << f;
  }
}

}  // namespace
}  // namespace normsvc::kernels
