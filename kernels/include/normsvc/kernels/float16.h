// Host-side conversions between float and the 16-bit float formats, with
// round-to-nearest-even, matching the device intrinsics bit for bit
// (__float2half_rn, __float2bfloat16_rn). NaN stays NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels {

namespace detail {

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace detail

// Inline: the CPU reference converts every element it reads and writes.
inline uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = detail::FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;   // NaN (quiet)
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // overflow rounds to Inf
  if (abs_bits >= 0x38800000u) {                       // normal half
    const uint32_t mantissa_odd = (abs_bits >> 13) & 1u;
    const uint32_t rounded = abs_bits + 0xfffu + mantissa_odd;  // RNE on 13 dropped bits
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  // Subnormal half or zero: value / 2^-24 rounded to nearest even.
  const float scaled = detail::BitsFloat(abs_bits) * 16777216.0f;  // exact: power of two
  const float rounded = std::nearbyint(scaled);                    // default mode: to nearest even
  return sign | static_cast<uint16_t>(rounded);
}

inline float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return detail::BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return detail::BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t FloatToBf16Bits(float value) {
  const uint32_t bits = detail::FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

inline float Bf16BitsToFloat(uint16_t bits) {
  return detail::BitsFloat(static_cast<uint32_t>(bits) << 16);
}

// Reads element `index` of a `dtype` array as float.
float LoadAsFloat(const void* data, DType dtype, int64_t index);
// Writes `value` rounded to `dtype` (round to nearest even) at `index`.
void StoreFromFloat(void* data, DType dtype, int64_t index, float value);
// Rounds a double to `dtype` as the reference does: first to float, then to
// the 16-bit format for kF16/kBF16 (double rounding is within the tolerances
// the tests state).
void StoreFromDouble(void* data, DType dtype, int64_t index, double value);

}  // namespace normsvc::kernels
