// The forward kernel lookups by x dtype (kernel_registry.h): each dtype's
// instantiations live in their own translation units (forward_<dtype>.cu,
// forward_lean_<dtype>.cu, forward_realign_<dtype>.cu).
#include "kernel_registry.h"

namespace normsvc::kernels::detail {

ForwardKernel FindForwardKernel(DType x_dtype, const KernelPlan& plan, ForwardPath path,
                                DType param_dtype, bool single_segment) {
  switch (path) {
    case ForwardPath::kGeneral:
      switch (x_dtype) {
        case DType::kF32:
          return FindForwardKernelF32(plan);
        case DType::kF16:
          return FindForwardKernelF16(plan);
        case DType::kBF16:
          return FindForwardKernelBF16(plan);
      }
      return nullptr;
    case ForwardPath::kLean:
      switch (x_dtype) {
        case DType::kF32:
          return FindLeanForwardKernelF32(plan, param_dtype, single_segment);
        case DType::kF16:
          return FindLeanForwardKernelF16(plan, param_dtype, single_segment);
        case DType::kBF16:
          return FindLeanForwardKernelBF16(plan, param_dtype, single_segment);
      }
      return nullptr;
    case ForwardPath::kRealign:
      switch (x_dtype) {
        case DType::kF32:
          return FindRealignForwardKernelF32(plan, param_dtype, single_segment);
        case DType::kF16:
          return FindRealignForwardKernelF16(plan, param_dtype, single_segment);
        case DType::kBF16:
          return FindRealignForwardKernelBF16(plan, param_dtype, single_segment);
      }
      return nullptr;
  }
  return nullptr;
}

ForwardKernel FindRealignStagedForwardKernel(DType x_dtype, const KernelPlan& plan,
                                             DType param_dtype, bool single) {
  switch (x_dtype) {
    case DType::kF32:
      return FindRealignStagedForwardKernelF32(plan, param_dtype, single);
    case DType::kF16:
      return FindRealignStagedForwardKernelF16(plan, param_dtype, single);
    case DType::kBF16:
      return FindRealignStagedForwardKernelBF16(plan, param_dtype, single);
  }
  return nullptr;
}

ForwardKernel FindRingForwardKernel(DType x_dtype, const KernelPlan& plan, DType param_dtype,
                                    NormOp op) {
  switch (x_dtype) {
    case DType::kF32:
      return FindRingForwardKernelF32(plan, param_dtype, op);
    case DType::kF16:
      return FindRingForwardKernelF16(plan, param_dtype, op);
    case DType::kBF16:
      return FindRingForwardKernelBF16(plan, param_dtype, op);
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
