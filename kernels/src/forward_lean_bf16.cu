// One-segment forward kernels for bf16 activations (gamma/beta bf16 or fp32).
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindLeanForwardKernelBF16(const KernelPlan& plan, DType param_dtype, bool single) {
  return param_dtype == DType::kF32
             ? LeanForwardKernelFor<__nv_bfloat16, float>(plan, single)
             : LeanForwardKernelFor<__nv_bfloat16, __nv_bfloat16>(plan, single);
}

ForwardKernel FindRingForwardKernelBF16(const KernelPlan& plan, DType param_dtype, NormOp op) {
  return param_dtype == DType::kF32 ? RingForwardKernelFor<__nv_bfloat16, float>(plan, op)
                                    : RingForwardKernelFor<__nv_bfloat16, __nv_bfloat16>(plan, op);
}

ForwardKernel FindParamStagedForwardKernelBF16(const KernelPlan& plan) {
  return ParamStagedForwardKernelFor<__nv_bfloat16>(plan);
}

}  // namespace normsvc::kernels::detail
