// Maps a forward plan to its kernel instantiation for one x dtype T. The set
// of (layout, slots) pairs here is exactly what PlanForward produces.
#pragma once

#include "forward_kernel.cuh"
#include "forward_lean_kernel.cuh"
#include "forward_realign_kernel.cuh"
#include "forward_realign_staged_kernel.cuh"
#include "forward_ring_kernel.cuh"
#include "forward_staged_kernel.cuh"
#include "kernel_registry.h"
#include "realign_policy.h"

namespace normsvc::kernels::detail {

// The general kernels: any output dtype, any alignment.
template <typename T>
ForwardKernel ForwardKernelFor(const KernelPlan& plan) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  switch (plan.layout) {
    case Layout::kVector:
      if (plan.width != kVectorWidth) return nullptr;
      if (plan.slots == 1) return ForwardRowsKernel<T, 1, kVectorWidth>;
      if (plan.slots == 2) return ForwardRowsKernel<T, 2, kVectorWidth>;
      if (plan.slots == 3) return ForwardRowsKernel<T, 3, kVectorWidth>;  // partial last chunk
      if (plan.slots == 4) return ForwardRowsKernel<T, 4, kVectorWidth>;
      return nullptr;
    case Layout::kStrided:
      if (plan.slots == 16) return ForwardRowsKernel<T, 16, 1>;
      return nullptr;
    case Layout::kStreamed:
      return ForwardStreamedKernel<T>;
    case Layout::kStaged:
      return plan.width == kVectorWidth ? ForwardStagedKernel<T, false> : nullptr;
  }
  return nullptr;
}

// The specialized kernels (ForwardPath::kLean in kernel_registry.h), with
// gamma/beta in dtype P. Only plans of 4 vector or 16 strided slots span
// clusters (PlanForward).
template <typename T, typename P, bool kSingle>
ForwardKernel LeanForwardKernelFor(const KernelPlan& plan) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  // Staged rows take the lean path only with gamma/beta in T or none
  // (ChooseForwardPath), so P does not matter to the kernel.
  if (plan.layout == Layout::kStaged) {
    return plan.width == kVectorWidth ? ForwardStagedKernel<T, true> : nullptr;
  }
  const bool cluster = plan.cluster > 1;
  if (plan.layout == Layout::kVector && plan.width == kVectorWidth) {
    if (plan.slots == 1 && !cluster)
      return ForwardLeanKernel<T, P, 1, kVectorWidth, kSingle, false>;
    if (plan.slots == 2 && !cluster)
      return ForwardLeanKernel<T, P, 2, kVectorWidth, kSingle, false>;
    if (plan.slots == 4) {
      return cluster ? ForwardLeanKernel<T, P, 4, kVectorWidth, kSingle, true>
                     : ForwardLeanKernel<T, P, 4, kVectorWidth, kSingle, false>;
    }
  }
  if (plan.layout == Layout::kStrided && plan.slots == 16) {
    return cluster ? ForwardLeanKernel<T, P, 16, 1, kSingle, true>
                   : ForwardLeanKernel<T, P, 16, 1, kSingle, false>;
  }
  return nullptr;
}

template <typename T, typename P>
ForwardKernel LeanForwardKernelFor(const KernelPlan& plan, bool single) {
  return single ? LeanForwardKernelFor<T, P, true>(plan) : LeanForwardKernelFor<T, P, false>(plan);
}

// The specialized kernel that stages gamma/beta (= T) in shared memory (see
// UsesParamStaging in kernel_registry.h): one in-block segment.
template <typename T>
ForwardKernel ParamStagedForwardKernelFor(const KernelPlan& plan) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  if (plan.layout != Layout::kVector || plan.width != kVectorWidth || plan.cluster != 1) {
    return nullptr;
  }
  if (plan.slots == 1) return ForwardLeanKernel<T, T, 1, kVectorWidth, true, false, true>;
  if (plan.slots == 2) return ForwardLeanKernel<T, T, 2, kVectorWidth, true, false, true>;
  if (plan.slots == 4) return ForwardLeanKernel<T, T, 4, kVectorWidth, true, false, true>;
  return nullptr;
}

// The realigning kernel (ForwardPath::kRealign in kernel_registry.h), with
// gamma/beta in dtype P: vector plans within a block, at most
// kRealignMaxSlots slots.
template <typename T, typename P, bool kSingle>
ForwardKernel RealignForwardKernelFor(const KernelPlan& plan) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  if (plan.layout != Layout::kVector || plan.width != kVectorWidth || plan.cluster != 1) {
    return nullptr;
  }
  if (plan.slots == 1) return ForwardRealignKernel<T, P, 1, kVectorWidth, kSingle>;
  if (plan.slots == 2) return ForwardRealignKernel<T, P, 2, kVectorWidth, kSingle>;
  if (plan.slots == 3) return ForwardRealignKernel<T, P, 3, kVectorWidth, kSingle>;
  return nullptr;  // more than kRealignMaxSlots: the general kernel
}

template <typename T, typename P>
ForwardKernel RealignForwardKernelFor(const KernelPlan& plan, bool single) {
  return single ? RealignForwardKernelFor<T, P, true>(plan)
                : RealignForwardKernelFor<T, P, false>(plan);
}

// The staged realigning kernel (RealignPolicy::kStaged, realign_policy.h),
// with gamma/beta in dtype P: the realigning kernel's plans.
template <typename T, typename P, bool kSingle, int kStages>
ForwardKernel RealignStagedForwardKernelFor(const KernelPlan& plan) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  if (plan.layout != Layout::kVector || plan.width != kVectorWidth || plan.cluster != 1) {
    return nullptr;
  }
  if (plan.slots == 1) return ForwardRealignStagedKernel<T, P, 1, kVectorWidth, kSingle, kStages>;
  if (plan.slots == 2) return ForwardRealignStagedKernel<T, P, 2, kVectorWidth, kSingle, kStages>;
  if (plan.slots == 3) return ForwardRealignStagedKernel<T, P, 3, kVectorWidth, kSingle, kStages>;
  return nullptr;
}

template <typename T, typename P>
ForwardKernel RealignStagedForwardKernelFor(const KernelPlan& plan, bool single) {
  return single ? RealignStagedForwardKernelFor<T, P, true, kRealignForwardStages>(plan)
                : RealignStagedForwardKernelFor<T, P, false, kRealignForwardStages>(plan);
}

// The ring kernel of `op` (see UsesRingForward in kernel_registry.h), with
// gamma/beta in dtype P.
template <typename T, typename P>
ForwardKernel RingForwardKernelFor(const KernelPlan& plan, NormOp op) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  if (plan.layout == Layout::kVector && plan.width == kVectorWidth && plan.slots == kRingSlots) {
    return op == NormOp::kLayerNorm ? ForwardRingKernel<T, P, true>
                                    : ForwardRingKernel<T, P, false>;
  }
  return nullptr;
}

}  // namespace normsvc::kernels::detail
