// Backward kernels for f16 activations.
#include "backward_instances.cuh"

namespace normsvc::kernels::detail {

BackwardKernel FindBackwardKernelF16(const KernelPlan& plan, int64_t hidden, NormOp op,
                                     bool saved_stats, bool aligned) {
  return BackwardKernelFor<__half>(plan, hidden, op, saved_stats, aligned);
}

BackwardKernel FindRealignBackwardKernelF16(const KernelPlan& plan, NormOp op, bool saved_stats) {
  return RealignBackwardKernelFor<__half>(plan, op, saved_stats);
}

}  // namespace normsvc::kernels::detail
