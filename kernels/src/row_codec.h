// Rows of fp32, fp16 or bf16 elements as doubles and back, for the CPU
// reference (reference.cc): the dtype switch once a row, the conversions
// inlined, every value exactly what LoadAsFloat / StoreFromDouble give
// element by element (float16.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

template <DType D>
using DTypeConstant = std::integral_constant<DType, D>;

// Calls f(DTypeConstant<dtype>{}): one switch per row, not per element.
template <typename F>
inline void WithDType(DType dtype, const F& f) {
  switch (dtype) {
    case DType::kF32:
      return f(DTypeConstant<DType::kF32>{});
    case DType::kF16:
      return f(DTypeConstant<DType::kF16>{});
    case DType::kBF16:
      return f(DTypeConstant<DType::kBF16>{});
  }
}

// Element i as float, as LoadAsFloat reads it.
template <DType D>
inline float LoadElement(const void* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    return static_cast<const float*>(row)[i];
  } else if constexpr (D == DType::kF16) {
    return HalfBitsToFloat(static_cast<const uint16_t*>(row)[i]);
  } else {
    return Bf16BitsToFloat(static_cast<const uint16_t*>(row)[i]);
  }
}

// Writes `value` rounded to D at i, as StoreFromFloat does; returns the
// rounded value.
template <DType D>
inline float StoreElement(void* row, int64_t i, float value) {
  if constexpr (D == DType::kF32) {
    static_cast<float*>(row)[i] = value;
    return value;
  } else if constexpr (D == DType::kF16) {
    const uint16_t bits = FloatToHalfBits(value);
    static_cast<uint16_t*>(row)[i] = bits;
    return HalfBitsToFloat(bits);
  } else {
    const uint16_t bits = FloatToBf16Bits(value);
    static_cast<uint16_t*>(row)[i] = bits;
    return Bf16BitsToFloat(bits);
  }
}

// values[i] = element i of a `dtype` row, widened exactly.
inline void DecodeRow(const void* row, DType dtype, int64_t n, double* values) {
  WithDType(dtype, [&](auto d) {
    for (int64_t i = 0; i < n; ++i) values[i] = LoadElement<d()>(row, i);
  });
}

// Element i of a `dtype` row = values[i] rounded as StoreFromDouble rounds:
// to float, then to the 16-bit format.
inline void EncodeRow(const double* values, int64_t n, DType dtype, void* row) {
  WithDType(dtype, [&](auto d) {
    for (int64_t i = 0; i < n; ++i) StoreElement<d()>(row, i, static_cast<float>(values[i]));
  });
}

}  // namespace normsvc::kernels::detail
