// Backward kernels for bf16 activations.
#include "backward_instances.cuh"

namespace normsvc::kernels::detail {

BackwardKernel FindBackwardKernelBF16(const KernelPlan& plan) {
  return BackwardKernelFor<__nv_bfloat16>(plan);
}

}  // namespace normsvc::kernels::detail
