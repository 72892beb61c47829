// Forward kernels for f32 activations.
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindForwardKernelF32(const KernelPlan& plan) { return ForwardKernelFor<float>(plan); }

}  // namespace normsvc::kernels::detail
