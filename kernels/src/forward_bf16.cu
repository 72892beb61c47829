// Forward kernels for bf16 activations.
#include "forward_instances.cuh"

namespace normsvc::kernels::detail {

ForwardKernel FindForwardKernelBF16(const KernelPlan& plan) {
  return ForwardKernelFor<__nv_bfloat16>(plan);
}

}  // namespace normsvc::kernels::detail
