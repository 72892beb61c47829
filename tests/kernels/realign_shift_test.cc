// The realigning kernel's word shift (kernels/src/realign_shift.h) against a
// byte-by-byte copy, for 16- and 32-byte chunks and every even byte offset
// (2-byte and 4-byte elements), on fresh random words. Host code: runs on
// every build.
#include "realign_shift.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

namespace normsvc::kernels::detail {
namespace {

template <int kWords>
void ExpectEveryShiftMatchesAByteCopy(std::mt19937_64& rng) {
  for (int trial = 0; trial < 64; ++trial) {
    uint32_t lo[kWords];
    uint32_t hi[kWords];
    for (int i = 0; i < kWords; ++i) {
      lo[i] = static_cast<uint32_t>(rng());
      hi[i] = static_cast<uint32_t>(rng());
    }
    uint8_t bytes[8 * kWords];
    std::memcpy(bytes, lo, sizeof(lo));
    std::memcpy(bytes + sizeof(lo), hi, sizeof(hi));
    for (int shift = 0; shift < 4 * kWords; shift += 2) {
      uint32_t out[kWords];
      ShiftWords<kWords>(lo, hi, shift, out);
      uint32_t expected[kWords];
      std::memcpy(expected, bytes + shift, sizeof(expected));
      for (int i = 0; i < kWords; ++i) {
        ASSERT_EQ(out[i], expected[i])
            << kWords << " words, shift " << shift << " bytes, word " << i;
      }
    }
  }
}

TEST(RealignShift, EveryEvenByteShiftOfSixteenAndThirtyTwoBytes) {
  // Fresh words each run; the seed is printed so that a failure can be
  // replayed.
  const uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] realign shift: %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  ExpectEveryShiftMatchesAByteCopy<4>(rng);
  ExpectEveryShiftMatchesAByteCopy<8>(rng);
}

}  // namespace
}  // namespace normsvc::kernels::detail
