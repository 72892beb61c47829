// The forward kernel lookups by x dtype (kernel_registry.h): each dtype's
// instantiations live in their own translation units (forward_<dtype>.cu,
// forward_lean_<dtype>.cu).
#include "kernel_registry.h"

namespace normsvc::kernels::detail {

ForwardKernel FindForwardKernel(DType x_dtype, const KernelPlan& plan, bool fast, DType param_dtype,
                                bool single_segment) {
  switch (x_dtype) {
    case DType::kF32:
      return fast ? FindLeanForwardKernelF32(plan, param_dtype, single_segment)
                  : FindForwardKernelF32(plan);
    case DType::kF16:
      return fast ? FindLeanForwardKernelF16(plan, param_dtype, single_segment)
                  : FindForwardKernelF16(plan);
    case DType::kBF16:
      return fast ? FindLeanForwardKernelBF16(plan, param_dtype, single_segment)
                  : FindForwardKernelBF16(plan);
  }
  return nullptr;
}

ForwardKernel FindStagedForwardKernel(DType x_dtype, const KernelPlan& plan, DType param_dtype) {
  switch (x_dtype) {
    case DType::kF32:
      return FindStagedForwardKernelF32(plan, param_dtype);
    case DType::kF16:
      return FindStagedForwardKernelF16(plan, param_dtype);
    case DType::kBF16:
      return FindStagedForwardKernelBF16(plan, param_dtype);
  }
  return nullptr;
}

ForwardKernel FindRingForwardKernel(DType x_dtype, const KernelPlan& plan, DType param_dtype) {
  switch (x_dtype) {
    case DType::kF32:
      return FindRingForwardKernelF32(plan, param_dtype);
    case DType::kF16:
      return FindRingForwardKernelF16(plan, param_dtype);
    case DType::kBF16:
      return FindRingForwardKernelBF16(plan, param_dtype);
  }
  return nullptr;
}

ForwardKernel FindParamStagedForwardKernel(DType x_dtype, const KernelPlan& plan) {
  switch (x_dtype) {
    case DType::kF32:
      return FindParamStagedForwardKernelF32(plan);
    case DType::kF16:
      return FindParamStagedForwardKernelF16(plan);
    case DType::kBF16:
      return FindParamStagedForwardKernelBF16(plan);
  }
  return nullptr;
}

}  // namespace normsvc::kernels::detail
