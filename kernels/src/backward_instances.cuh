// Maps a backward plan to its kernel instantiation for one x dtype T. The set
// of (layout, slots) pairs here is exactly what PlanBackward produces; the
// vector plans of one or two slots take the staged kernel (UsesStagedBackward).
#pragma once

#include "backward_kernel.cuh"
#include "backward_realign_kernel.cuh"
#include "backward_staged_kernel.cuh"
#include "kernel_registry.h"

namespace normsvc::kernels::detail {

template <typename T, int V, bool kFull, bool kAligned, bool kCluster, bool kBatched>
BackwardKernel StagedBackwardKernelFor(NormOp op, bool saved_stats) {
  constexpr int kW = static_cast<int>(16 / sizeof(T));
  // One chunk a thread spans clusters for RMSNorm only (PlanBackward); 16-bit
  // batched kernels are RMSNorm's only (BatchesSavedStatistics).
  constexpr bool kRmsNormOnly = (V == 1 && kCluster) || (kBatched && sizeof(T) == 2);
  if (op == NormOp::kLayerNorm) {
    if constexpr (kRmsNormOnly) {
      return nullptr;
    } else {
      return saved_stats
                 ? BackwardStagedKernel<T, V, kW, kFull, true, true, kAligned, kCluster, kBatched>
                 : BackwardStagedKernel<T, V, kW, kFull, true, false, kAligned, kCluster>;
    }
  }
  return saved_stats
             ? BackwardStagedKernel<T, V, kW, kFull, false, true, kAligned, kCluster, kBatched>
             : BackwardStagedKernel<T, V, kW, kFull, false, false, kAligned, kCluster>;
}

template <typename T, int V, bool kFull, bool kAligned, bool kCluster>
BackwardKernel StagedBackwardKernelFor(const KernelPlan& plan, NormOp op, bool saved_stats) {
  // Saved statistics kStatisticsBatch rows at a time (launch_plan.h): only
  // two-chunk cluster kernels are compiled that way.
  if constexpr (kCluster && V == 2) {
    if (BatchesSavedStatistics(plan, DTypeOfElement<T>(), op)) {
      return StagedBackwardKernelFor<T, V, kFull, kAligned, kCluster, true>(op, saved_stats);
    }
  }
  return StagedBackwardKernelFor<T, V, kFull, kAligned, kCluster, false>(op, saved_stats);
}

template <typename T, int V, bool kCluster>
BackwardKernel StagedBackwardKernelFor(const KernelPlan& plan, int64_t hidden, NormOp op,
                                       bool saved_stats, bool aligned) {
  if (!aligned) {
    return StagedBackwardKernelFor<T, V, false, false, kCluster>(plan, op, saved_stats);
  }
  const bool full = hidden == static_cast<int64_t>(V) * plan.width * plan.row_threads;
  return full ? StagedBackwardKernelFor<T, V, true, true, kCluster>(plan, op, saved_stats)
              : StagedBackwardKernelFor<T, V, false, true, kCluster>(plan, op, saved_stats);
}

// Rows that do not allow 16-byte accesses take the kernels that test every
// chunk (kFull false): alignment never changes which arithmetic runs. The
// plans that span clusters (PlanBackward: two slots, and one slot for
// RMSNorm's 16-bit rows) have kernels of their own.
template <typename T, int V>
BackwardKernel StagedBackwardKernelFor(const KernelPlan& plan, int64_t hidden, NormOp op,
                                       bool saved_stats, bool aligned) {
  if constexpr (V == 2 || sizeof(T) == 2) {
    if (plan.cluster > 1) {
      return StagedBackwardKernelFor<T, V, true>(plan, hidden, op, saved_stats, aligned);
    }
  }
  if (plan.cluster > 1) return nullptr;
  return StagedBackwardKernelFor<T, V, false>(plan, hidden, op, saved_stats, aligned);
}

// `op`, `saved_stats` and `aligned` select among the staged kernels (the
// others read them at run time).
template <typename T>
BackwardKernel BackwardKernelFor(const KernelPlan& plan, int64_t hidden, NormOp op,
                                 bool saved_stats, bool aligned) {
  constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
  switch (plan.layout) {
    case Layout::kVector:
      if (plan.width != kVectorWidth) return nullptr;
      if (plan.slots == 1)
        return StagedBackwardKernelFor<T, 1>(plan, hidden, op, saved_stats, aligned);
      if (plan.slots == 2)
        return StagedBackwardKernelFor<T, 2>(plan, hidden, op, saved_stats, aligned);
      return nullptr;
    case Layout::kStrided:
      if (plan.slots == 1 && plan.cluster == 1) return BackwardRowsKernel<T, 1, 1, false>;
      if (plan.slots == 8) {
        return plan.cluster > 1 ? BackwardRowsKernel<T, 8, 1, true>
                                : BackwardRowsKernel<T, 8, 1, false>;
      }
      return nullptr;
    case Layout::kStreamed:
      return BackwardStreamedKernel<T>;
    case Layout::kStaged:
      return nullptr;  // forward plans only (PlanBackward never makes one)
  }
  return nullptr;
}

// The BackwardRealignKernel of K words a thread, LayerNorm or RMSNorm, with
// saved or recomputed statistics.
template <typename T, int K>
BackwardKernel RealignBackwardKernelFor(NormOp op, bool saved_stats) {
  if (op == NormOp::kLayerNorm) {
    return saved_stats ? BackwardRealignKernel<T, K, true, true>
                       : BackwardRealignKernel<T, K, true, false>;
  }
  return saved_stats ? BackwardRealignKernel<T, K, false, true>
                     : BackwardRealignKernel<T, K, false, false>;
}

// The kernel of a PlanBackwardRealign plan (one or two words a thread).
template <typename T>
BackwardKernel RealignBackwardKernelFor(const KernelPlan& plan, NormOp op, bool saved_stats) {
  if (plan.slots == 1) return RealignBackwardKernelFor<T, 1>(op, saved_stats);
  if (plan.slots == 2) return RealignBackwardKernelFor<T, 2>(op, saved_stats);
  return nullptr;
}

}  // namespace normsvc::kernels::detail
