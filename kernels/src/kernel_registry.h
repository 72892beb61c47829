// The kernel instantiations, looked up by (x dtype, layout, slots). Each
// dtype's kernels live in their own translation unit (forward_<dtype>.cu,
// backward_<dtype>.cu) so they compile in parallel.
#pragma once

#include "kernel_params.h"
#include "launch_plan.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

using ForwardKernel = void (*)(ForwardParams);
using BackwardKernel = void (*)(BackwardParams);

// Null when no instantiation matches the plan (a planning bug: the launcher
// reports kInternal).
ForwardKernel FindForwardKernel(DType x_dtype, const KernelPlan& plan);
BackwardKernel FindBackwardKernel(DType x_dtype, const KernelPlan& plan);

ForwardKernel FindForwardKernelF32(const KernelPlan& plan);
ForwardKernel FindForwardKernelF16(const KernelPlan& plan);
ForwardKernel FindForwardKernelBF16(const KernelPlan& plan);
BackwardKernel FindBackwardKernelF32(const KernelPlan& plan);
BackwardKernel FindBackwardKernelF16(const KernelPlan& plan);
BackwardKernel FindBackwardKernelBF16(const KernelPlan& plan);

}  // namespace normsvc::kernels::detail
