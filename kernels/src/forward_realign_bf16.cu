// Realigning forward kernels (forward_realign_kernel.cuh) for bf16 activations,
// in their own translation unit so that they compile in parallel.
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindRealignForwardKernelBF16(const KernelPlan& plan, DType param_dtype, bool single) {
  return param_dtype == DType::kF32
             ? RealignForwardKernelFor<__nv_bfloat16, float>(plan, single)
             : RealignForwardKernelFor<__nv_bfloat16, __nv_bfloat16>(plan, single);
}

ForwardKernel FindRealignStagedForwardKernelBF16(const KernelPlan& plan, DType param_dtype,
                                                 bool single) {
  return param_dtype == DType::kF32
             ? RealignStagedForwardKernelFor<__nv_bfloat16, float>(plan, single)
             : RealignStagedForwardKernelFor<__nv_bfloat16, __nv_bfloat16>(plan, single);
}

}  // namespace normsvc::kernels::detail
