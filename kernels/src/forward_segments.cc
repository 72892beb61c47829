#include "forward_segments.h"

#include "alignment.h"

namespace normsvc::kernels::detail {
namespace {

// Whether `p`'s rows (pitch `row_stride` elements of `dtype`) start as far
// from a 16-byte boundary as the rows of x do, row for row. Null (absent)
// tensors do not constrain.
bool SharesRowOffsets(const void* p, int64_t row_stride, DType dtype, const ForwardSegment& s) {
  if (p == nullptr) return true;
  const auto offset = [](const void* q) { return reinterpret_cast<uintptr_t>(q) & 15u; };
  const auto pitch = [](int64_t stride, DType d) {
    return static_cast<uint64_t>(stride * static_cast<int64_t>(DTypeSize(d))) & 15u;
  };
  return offset(p) == offset(s.x) &&
         (s.rows <= 1 || pitch(row_stride, dtype) == pitch(s.x_row_stride, s.x_dtype));
}

}  // namespace

bool SegmentAllowsVectors(const ForwardSegment& s, const KernelPlan& plan) {
  return (plan.layout == Layout::kVector || plan.layout == Layout::kStaged) &&
         s.hidden % plan.width == 0 && AllowsVectors(s.x, s.rows, s.x_row_stride, s.x_dtype) &&
         AllowsVectors(s.residual, s.rows, s.residual_row_stride, s.x_dtype) &&
         AllowsVectors(s.residual_out, s.rows, s.residual_out_row_stride, s.x_dtype) &&
         AllowsVectors(s.out, s.rows, s.out_row_stride, s.out_dtype) &&
         AllowsVectors(s.gamma, 1, 0, s.param_dtype) && AllowsVectors(s.beta, 1, 0, s.param_dtype);
}

bool SegmentRealignable(const ForwardSegment& s) {
  const bool element_aligned = reinterpret_cast<uintptr_t>(s.x) % DTypeSize(s.x_dtype) == 0;
  return element_aligned && SharesRowOffsets(s.out, s.out_row_stride, s.out_dtype, s) &&
         SharesRowOffsets(s.residual, s.residual_row_stride, s.x_dtype, s) &&
         SharesRowOffsets(s.residual_out, s.residual_out_row_stride, s.x_dtype, s) &&
         AllowsVectors(s.gamma, 1, 0, s.param_dtype) && AllowsVectors(s.beta, 1, 0, s.param_dtype);
}

ForwardPath SegmentPath(const ForwardSegment& s, const KernelPlan& plan) {
  const bool params_as_x = (s.gamma == nullptr && s.beta == nullptr) || s.param_dtype == s.x_dtype;
  return ChooseForwardPath(plan, s.x_dtype, s.out_dtype, SegmentAllowsVectors(s, plan),
                           SegmentRealignable(s), s.residual == nullptr && params_as_x);
}

uint64_t SegmentLaunchKey(const ForwardSegment& s, const KernelPlan& plan, ForwardPath path) {
  uint64_t key = static_cast<uint64_t>(s.x_dtype);
  key = key * 2 + static_cast<uint64_t>(s.op);
  key = key * 4 + static_cast<uint64_t>(plan.layout);
  key = key * 32 + static_cast<uint64_t>(plan.slots);
  key = key * 32 + static_cast<uint64_t>(plan.width);
  key = key * 16384 + static_cast<uint64_t>(plan.row_threads);  // up to 8192 (a cluster of 1024s)
  key = key * 16 + static_cast<uint64_t>(plan.cluster);
  key = key * 2048 + static_cast<uint64_t>(plan.block_threads);
  key = key * 4 + static_cast<uint64_t>(s.param_dtype);  // sizes the parameter cache
  key = key * 4 + static_cast<uint64_t>(path);
  // Realigned rows with a residual take ForwardRealignKernel, those without
  // ForwardRealignStagedKernel (realign_policy.h): apart.
  key = key * 2 + (path == ForwardPath::kRealign && s.residual != nullptr ? 1 : 0);
  return key;
}

DeviceSegment ToDeviceSegment(const ForwardSegment& s, const KernelPlan& plan, int64_t first_row) {
  DeviceSegment d = {};
  d.x = s.x;
  d.residual = s.residual;
  d.residual_out = s.residual_out;
  d.gamma = s.gamma;
  d.beta = s.beta;
  d.out = s.out;
  d.mean = s.mean;
  d.rstd = s.rstd;
  d.x_stride = s.x_row_stride;
  d.residual_stride = s.residual_row_stride;
  d.residual_out_stride = s.residual_out_row_stride;
  d.out_stride = s.out_row_stride;
  d.first_row = first_row;
  d.hidden = static_cast<int32_t>(s.hidden);
  d.epsilon = s.epsilon;
  d.op = static_cast<uint8_t>(s.op);
  d.out_dtype = static_cast<uint8_t>(s.out_dtype);
  d.param_dtype = static_cast<uint8_t>(s.param_dtype);
  d.vectorized = SegmentAllowsVectors(s, plan) ? 1 : 0;
  return d;
}

}  // namespace normsvc::kernels::detail
