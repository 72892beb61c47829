// Alignment facts about tensors that the launchers decide paths by. Pure C++
// (no CUDA), so the host-side choices are tested on machines without a GPU.
#pragma once

#include <cstdint>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

inline bool IsAligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// A tensor of `rows` rows allows 16-byte chunk accesses when its base is
// 16-byte aligned and, for more than one row, its row pitch is a multiple of
// 16 bytes. Null (absent) tensors do not constrain.
inline bool AllowsVectors(const void* base, int64_t rows, int64_t row_stride, DType dtype) {
  if (base == nullptr) return true;
  if (!IsAligned16(base)) return false;
  return rows <= 1 || (row_stride * static_cast<int64_t>(DTypeSize(dtype))) % 16 == 0;
}

}  // namespace normsvc::kernels::detail
