// Backward kernels for bf16 activations.
#include "backward_instances.cuh"

namespace normsvc::kernels::detail {

BackwardKernel FindBackwardKernelBF16(const KernelPlan& plan, int64_t hidden, NormOp op,
                                      bool saved_stats, bool aligned) {
  return BackwardKernelFor<__nv_bfloat16>(plan, hidden, op, saved_stats, aligned);
}

BackwardKernel FindRealignBackwardKernelBF16(const KernelPlan& plan, NormOp op, bool saved_stats) {
  return RealignBackwardKernelFor<__nv_bfloat16>(plan, op, saved_stats);
}

}  // namespace normsvc::kernels::detail
