// One-segment forward kernels for fp32 activations (gamma/beta fp32).
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindLeanForwardKernelF32(const KernelPlan& plan, DType param_dtype, bool single) {
  return param_dtype == DType::kF32 ? LeanForwardKernelFor<float, float>(plan, single) : nullptr;
}

ForwardKernel FindRingForwardKernelF32(const KernelPlan& plan, DType param_dtype, NormOp op) {
  return param_dtype == DType::kF32 ? RingForwardKernelFor<float, float>(plan, op) : nullptr;
}

ForwardKernel FindParamStagedForwardKernelF32(const KernelPlan& plan) {
  return ParamStagedForwardKernelFor<float>(plan);
}

}  // namespace normsvc::kernels::detail
