// Forward kernels for f16 activations.
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindForwardKernelF16(const KernelPlan& plan) {
  return ForwardKernelFor<__half>(plan);
}

}  // namespace normsvc::kernels::detail
