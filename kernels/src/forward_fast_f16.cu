// Specialized forward kernels for f16 activations (gamma/beta f16 or fp32).
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindFastForwardKernelF16(const KernelPlan& plan, DType param_dtype) {
  return param_dtype == DType::kF32 ? FastForwardKernelFor<__half, float>(plan)
                                    : FastForwardKernelFor<__half, __half>(plan);
}

}  // namespace normsvc::kernels::detail
