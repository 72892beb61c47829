// Backward kernels for f32 activations.
#include "backward_instances.cuh"

namespace normsvc::kernels::detail {

BackwardKernel FindBackwardKernelF32(const KernelPlan& plan, int64_t hidden, NormOp op,
                                     bool saved_stats, bool aligned) {
  return BackwardKernelFor<float>(plan, hidden, op, saved_stats, aligned);
}

BackwardKernel FindRealignBackwardKernelF32(const KernelPlan& plan, NormOp op, bool saved_stats) {
  return RealignBackwardKernelFor<float>(plan, op, saved_stats);
}

}  // namespace normsvc::kernels::detail
