// Realigning forward kernels (forward_realign_kernel.cuh) for fp16 activations,
// in their own translation unit so that they compile in parallel.
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindRealignForwardKernelF16(const KernelPlan& plan, DType param_dtype, bool single) {
  return param_dtype == DType::kF32 ? RealignForwardKernelFor<__half, float>(plan, single)
                                    : RealignForwardKernelFor<__half, __half>(plan, single);
}

ForwardKernel FindRealignStagedForwardKernelF16(const KernelPlan& plan, DType param_dtype,
                                                bool single) {
  return param_dtype == DType::kF32 ? RealignStagedForwardKernelFor<__half, float>(plan, single)
                                    : RealignStagedForwardKernelFor<__half, __half>(plan, single);
}

}  // namespace normsvc::kernels::detail
