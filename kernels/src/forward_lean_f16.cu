// One-segment forward kernels for fp16 activations (gamma/beta fp16 or fp32).
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindLeanForwardKernelF16(const KernelPlan& plan, DType param_dtype, bool single) {
  return param_dtype == DType::kF32 ? LeanForwardKernelFor<__half, float>(plan, single)
                                    : LeanForwardKernelFor<__half, __half>(plan, single);
}

ForwardKernel FindRingForwardKernelF16(const KernelPlan& plan, DType param_dtype, NormOp op) {
  return param_dtype == DType::kF32 ? RingForwardKernelFor<__half, float>(plan, op)
                                    : RingForwardKernelFor<__half, __half>(plan, op);
}

ForwardKernel FindParamStagedForwardKernelF16(const KernelPlan& plan) {
  return ParamStagedForwardKernelFor<__half>(plan);
}

}  // namespace normsvc::kernels::detail
