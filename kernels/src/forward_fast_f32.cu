// Specialized forward kernels for f32 activations (gamma/beta f32).
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindFastForwardKernelF32(const KernelPlan& plan, DType param_dtype) {
  return param_dtype == DType::kF32 ? FastForwardKernelFor<float, float>(plan) : nullptr;
}

}  // namespace normsvc::kernels::detail
