// Backward kernels for f32 activations.
#include "backward_instances.cuh"

namespace normsvc::kernels::detail {

BackwardKernel FindBackwardKernelF32(const KernelPlan& plan, int64_t hidden, NormOp op,
                                     bool saved_stats, bool aligned) {
  return BackwardKernelFor<float>(plan, hidden, op, saved_stats, aligned);
}

}  // namespace normsvc::kernels::detail
