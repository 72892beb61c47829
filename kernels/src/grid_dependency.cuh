// Programmatic dependent launch (sm_90): a forward or backward launch (and
// the backward's column reduction) may be scheduled
// while the previous kernel in its stream is still running, so that its
// launch latency overlaps that kernel's tail (what a chain of small launches,
// e.g. a CUDA graph of one-row normalizations, pays per call).
//
// Contract: every kernel launched with the early-launch attribute
// (LaunchWithPlan's `early_launch`) calls WaitForPriorGrids() before its
// first global memory access; that waits until the previous grid has
// completed and its writes are visible. AllowDependentGrids() lets the next
// grid be scheduled; it never lets that grid read memory early, since that
// grid waits too. Without the attribute both are no-ops.
#pragma once

namespace normsvc::kernels::detail {

__device__ __forceinline__ void WaitForPriorGrids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void AllowDependentGrids() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The first statement of every forward and backward kernel.
__device__ __forceinline__ void BeginDependentGrid() {
  WaitForPriorGrids();
  AllowDependentGrids();
}

}  // namespace normsvc::kernels::detail
