// Maps a backward plan to its kernel instantiation for one x dtype T. The set
// of (layout, slots) pairs here is exactly what PlanBackward produces.
#pragma once

#include "backward_kernel.cuh"
#include "kernel_registry.h"

namespace normsvc::kernels::detail {

template <typename T>
BackwardKernel BackwardKernelFor(const KernelPlan& plan) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  switch (plan.layout) {
    case Layout::kVector:
      if (plan.width != kVectorWidth) return nullptr;
      if (plan.slots == 1) return BackwardRowsKernel<T, 1, kVectorWidth>;
      if (plan.slots == 2) return BackwardRowsKernel<T, 2, kVectorWidth>;
      if constexpr (kVectorWidth == 4) {
        if (plan.slots == 4) return BackwardRowsKernel<T, 4, kVectorWidth>;
      }
      return nullptr;
    case Layout::kStrided:
      if (plan.slots == 1) return BackwardRowsKernel<T, 1, 1>;
      if (plan.slots == 8) return BackwardRowsKernel<T, 8, 1>;
      return nullptr;
    case Layout::kStreamed:
      return BackwardStreamedKernel<T>;
  }
  return nullptr;
}

}  // namespace normsvc::kernels::detail
