// Shared pieces of the reference equivalence tests (forward and backward):
// random rows with specials, the seed, and the bit-for-bit comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::equivalence {

inline constexpr uint8_t kPoison = 0xA5;

// Whether some byte of `bytes` differs from `poison`: whether an output
// filled with it was written. (Every byte still the poison happens by chance
// only for outputs of a few elements: 0xA5A5 is a normal fp16 number, about
// -0.022.)
inline bool AnyByteDiffers(const std::vector<uint8_t>& bytes, uint8_t poison) {
  return std::any_of(bytes.begin(), bytes.end(), [poison](uint8_t b) { return b != poison; });
}

// A second poison, for an output that the first one left in doubt.
inline constexpr uint8_t kOtherPoison = 0x5A;
inline constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
inline constexpr NormOp kOps[] = {NormOp::kLayerNorm, NormOp::kRmsNorm};
inline constexpr int64_t kHiddens[] = {1, 5, 64, 2049, 4096, 8191};

using Bytes = std::vector<uint8_t>;

inline uint64_t Seed() {
  static const uint64_t seed = [] {
    const char* fixed = std::getenv("NORMSVC_TEST_SEED");
    const uint64_t s = fixed != nullptr
                           ? std::strtoull(fixed, nullptr, 10)
                           : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    std::printf("reference_equivalence_test seed: %llu (NORMSVC_TEST_SEED to repeat)\n",
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline float LargestFinite(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 65504.0f;
    case DType::kBF16:
      return 3.3895314e38f;
    case DType::kF32:
      break;
  }
  return std::numeric_limits<float>::max();
}

inline float SmallestSubnormal(DType dtype) {
  return dtype == DType::kF16 ? 5.9604645e-8f : std::numeric_limits<float>::denorm_min();
}

// One row's values: mostly normal data at random scale and offset; some rows
// are constant, far from zero, at the dtype's limits, or hold specials.
inline void FillRow(std::mt19937_64& rng, DType dtype, int64_t hidden, uint8_t* row) {
  std::uniform_int_distribution<int> kind_of(0, 9);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int kind = kind_of(rng);
  const double scale = std::exp2(unit(rng) * 16.0 - 8.0);
  const double offset = kind == 6 ? 1000.0 : (unit(rng) - 0.5) * 4.0;
  std::normal_distribution<double> normal(offset, scale);
  const float constant = static_cast<float>(normal(rng));
  const float limit = LargestFinite(dtype);
  const float specials[] = {NAN,   INFINITY, -INFINITY, 0.0f,
                            -0.0f, limit,    -limit,    SmallestSubnormal(dtype)};
  for (int64_t i = 0; i < hidden; ++i) {
    float value = kind == 7 ? constant : static_cast<float>(normal(rng));
    if (kind == 8 && unit(rng) < 0.5) value = limit * static_cast<float>(unit(rng) - 0.5);
    if (kind == 9 && unit(rng) < 0.05) value = specials[rng() % std::size(specials)];
    StoreFromFloat(row, dtype, i, value);
  }
}

// rows x stride elements; the padding between rows is random bytes (the
// reference must ignore it).
inline Bytes RandomRows(std::mt19937_64& rng, DType dtype, int64_t rows, int64_t hidden,
                        int64_t stride) {
  const std::size_t size = DTypeSize(dtype);
  Bytes bytes(static_cast<std::size_t>(rows * stride) * size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t r = 0; r < rows; ++r) FillRow(rng, dtype, hidden, bytes.data() + r * stride * size);
  return bytes;
}

inline int64_t RandomStride(std::mt19937_64& rng, int64_t hidden) {
  return rng() % 2 == 0 ? hidden : hidden + 1 + static_cast<int64_t>(rng() % 37);
}

// Elements that are NaN in both results but differ in sign or payload. IEEE
// 754 leaves open which operand's NaN an operation returns, and x86 returns
// the first operand's: which one that is for a commutative operation (a + b,
// a * b) is the compiler's choice of registers, not something the source
// states, and it differs between the scalar and the vectorized form of the
// same expression. Counted and printed; every other bit must match.
inline int64_t nan_payload_differences = 0;

enum class Element { kF32, kF16, kBF16, kF64 };

inline Element ElementOf(DType dtype) {
  return dtype == DType::kF16    ? Element::kF16
         : dtype == DType::kBF16 ? Element::kBF16
                                 : Element::kF32;
}

inline std::size_t ElementSize(Element e) {
  return e == Element::kF64 ? 8 : e == Element::kF32 ? 4 : 2;
}

inline bool IsNan(const uint8_t* p, Element e) {
  switch (e) {
    case Element::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return std::isnan(v);
    }
    case Element::kF16:
    case Element::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return (bits & 0x7fffu) > (e == Element::kF16 ? 0x7c00u : 0x7f80u);
    }
    case Element::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return std::isnan(v);
    }
  }
  return false;
}

// Bit-for-bit equality of every element (poisoned padding included) except
// the NaN sign/payload case above; on failure, the first differing element.
inline void ExpectSameBits(const Bytes& expected, const Bytes& actual, Element e,
                           const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  if (expected.empty() || std::memcmp(expected.data(), actual.data(), expected.size()) == 0) {
    return;
  }
  const std::size_t size = ElementSize(e);
  for (std::size_t at = 0; at < expected.size(); at += size) {
    const uint8_t* x = expected.data() + at;
    const uint8_t* y = actual.data() + at;
    if (std::memcmp(x, y, size) == 0) continue;
    if (IsNan(x, e) && IsNan(y, e)) {
      ++nan_payload_differences;
      continue;
    }
    uint64_t x_bits = 0, y_bits = 0;
    std::memcpy(&x_bits, x, size);
    std::memcpy(&y_bits, y, size);
    char text[64];
    std::snprintf(text, sizeof(text), "0x%llx expected, 0x%llx", (unsigned long long)x_bits,
                  (unsigned long long)y_bits);
    ADD_FAILURE() << what << ": element " << at / size << " differs (" << text << ")";
    return;
  }
}

inline void PrintNanPayloadDifferences() {
  std::printf("NaN elements differing only in sign/payload: %lld\n",
              static_cast<long long>(nan_payload_differences));
  nan_payload_differences = 0;
}

}  // namespace normsvc::kernels::equivalence
