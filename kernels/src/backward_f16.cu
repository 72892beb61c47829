// Backward kernels for f16 activations.
#include "backward_instances.cuh"

namespace normsvc::kernels::detail {

BackwardKernel FindBackwardKernelF16(const KernelPlan& plan) {
  return BackwardKernelFor<__half>(plan);
}

}  // namespace normsvc::kernels::detail
