// Host-side conversions between float and the 16-bit float formats, with
// round-to-nearest-even, matching the device intrinsics bit for bit
// (__float2half_rn, __float2bfloat16_rn). NaN stays NaN.
#pragma once

#include <cstdint>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels {

uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(uint16_t bits);
uint16_t FloatToBf16Bits(float value);
float Bf16BitsToFloat(uint16_t bits);

// Reads element `index` of a `dtype` array as float.
float LoadAsFloat(const void* data, DType dtype, int64_t index);
// Writes `value` rounded to `dtype` (round to nearest even) at `index`.
void StoreFromFloat(void* data, DType dtype, int64_t index, float value);
// Rounds a double to `dtype` as the reference does: first to float, then to
// the 16-bit format for kF16/kBF16 (double rounding is within the tolerances
// the tests state).
void StoreFromDouble(void* data, DType dtype, int64_t index, double value);

}  // namespace normsvc::kernels
