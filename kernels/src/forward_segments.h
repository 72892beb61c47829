// How the forward launcher classifies a segment: which kernel family may
// serve it (16-byte accesses, realigned rows, or element by element), which
// segments share a launch, and the segment as the kernels see it. Pure C++
// (no CUDA): the choices are tested on machines without a GPU.
#pragma once

#include <cstdint>

#include "kernel_params.h"
#include "kernel_registry.h"
#include "launch_plan.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

// Whether every pointer and row pitch of the segment allows 16-byte chunk
// accesses in the plan's layout (only the vector layout uses them, and only
// rows of whole chunks).
bool SegmentAllowsVectors(const ForwardSegment& s, const KernelPlan& plan);

// Whether ForwardRealignKernel's contract (forward_realign_kernel.cuh) holds
// for the segment's tensors: every row of out and the residuals starts as
// far from a 16-byte boundary as its x row, x starts on an element boundary,
// and gamma/beta are 16-byte aligned. (The plan decides the rest:
// ChooseForwardPath.)
bool SegmentRealignable(const ForwardSegment& s);

ForwardPath SegmentPath(const ForwardSegment& s, const KernelPlan& plan);

// Everything that selects a kernel and its launch shape, and the op (rows of
// one block must take the same reduction steps), packed into one integer;
// segments with equal keys share one launch.
uint64_t SegmentLaunchKey(const ForwardSegment& s, const KernelPlan& plan, ForwardPath path);

DeviceSegment ToDeviceSegment(const ForwardSegment& s, const KernelPlan& plan, int64_t first_row);

}  // namespace normsvc::kernels::detail
