// Realigning forward kernels (forward_realign_kernel.cuh) for fp32 activations,
// in their own translation unit so that they compile in parallel.
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindRealignForwardKernelF32(const KernelPlan& plan, DType param_dtype, bool single) {
  return param_dtype == DType::kF32 ? RealignForwardKernelFor<float, float>(plan, single) : nullptr;
}

ForwardKernel FindRealignStagedForwardKernelF32(const KernelPlan& plan, DType param_dtype,
                                                bool single) {
  return param_dtype == DType::kF32 ? RealignStagedForwardKernelFor<float, float>(plan, single)
                                    : nullptr;
}

}  // namespace normsvc::kernels::detail
