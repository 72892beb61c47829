#include "normsvc/kernels/float16.h"

#include <cmath>
#include <cstring>

namespace normsvc::kernels {

float LoadAsFloat(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[index];
    case DType::kF16:
      return HalfBitsToFloat(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(data)[index]);
  }
  return NAN;
}

void StoreFromFloat(void* data, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[index] = value;
      return;
    case DType::kF16:
      static_cast<uint16_t*>(data)[index] = FloatToHalfBits(value);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[index] = FloatToBf16Bits(value);
      return;
  }
}

void StoreFromDouble(void* data, DType dtype, int64_t index, double value) {
  StoreFromFloat(data, dtype, index, static_cast<float>(value));
}

}  // namespace normsvc::kernels
