// Backward kernels for f32 activations.
#include "backward_instances.cuh"

namespace normsvc::kernels::detail {

BackwardKernel FindBackwardKernelF32(const KernelPlan& plan) {
  return BackwardKernelFor<float>(plan);
}

}  // namespace normsvc::kernels::detail
