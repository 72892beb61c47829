#include "server/staging_layout.h"

#include <algorithm>

namespace normsvc::server {
namespace {

int64_t Size(kernels::DType dtype) { return static_cast<int64_t>(kernels::DTypeSize(dtype)); }

// Assigns offsets for one slice: inputs from *input_cursor, outputs from
// *output_cursor; each cursor advances by aligned sizes.
template <typename TakeInput, typename TakeOutput>
void LayOut(const TaskSlice& slice, StagingOffsets* o, TakeInput in, TakeOutput out) {
  const Task& t = *slice.task;
  const int64_t elements = slice.rows * t.hidden;
  if (t.kind == TaskKind::kForward) {
    const kernels::ForwardSegment& f = t.forward;
    o->x = in(elements * Size(f.x_dtype));
    if (f.residual != nullptr) o->residual = in(elements * Size(f.x_dtype));
    if (f.gamma != nullptr) o->gamma = in(t.hidden * Size(f.param_dtype));
    if (f.beta != nullptr) o->beta = in(t.hidden * Size(f.param_dtype));
    o->out = out(elements * Size(f.out_dtype));
    if (f.residual_out != nullptr) o->residual_out = out(elements * Size(f.x_dtype));
    if (f.mean != nullptr) o->mean = out(slice.rows * 4);
    if (f.rstd != nullptr) o->rstd = out(slice.rows * 4);
  } else {
    const kernels::BackwardArgs& b = t.backward;
    o->x = in(elements * Size(b.x_dtype));
    o->dy = in(elements * Size(b.x_dtype));
    if (b.gamma != nullptr) o->gamma = in(t.hidden * Size(b.param_dtype));
    if (b.mean != nullptr) o->saved_mean = in(slice.rows * 4);
    if (b.rstd != nullptr) o->saved_rstd = in(slice.rows * 4);
    o->out = out(elements * Size(b.x_dtype));
    if (b.dgamma != nullptr) o->dgamma = out(t.hidden * 4);
    if (b.dbeta != nullptr) o->dbeta = out(t.hidden * 4);
  }
}

}  // namespace

int64_t SliceStagingBytes(const Task& task, int64_t rows) {
  int64_t total = 0;
  auto take = [&total](int64_t bytes) {
    const int64_t offset = total;
    total += AlignStaging(bytes);
    return offset;
  };
  StagingOffsets ignored;
  LayOut(TaskSlice{&task, 0, rows}, &ignored, take, take);
  return total;
}

int64_t MaxRowsInStaging(const Task& task, int64_t capacity) {
  int64_t low = 0, high = task.rows;  // invariant: low fits
  while (low < high) {
    const int64_t mid = low + (high - low + 1) / 2;
    if (SliceStagingBytes(task, mid) <= capacity) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return low;
}

int64_t LargestRowStagingBytes(int64_t hidden) {
  // Never dereferenced: the layout only asks which tensors are present.
  static char present;
  Task forward;
  forward.kind = TaskKind::kForward;
  forward.rows = 1;
  forward.hidden = hidden;
  kernels::ForwardSegment& f = forward.forward;
  f.x_dtype = f.out_dtype = f.param_dtype = kernels::DType::kF32;
  f.x = f.residual = f.gamma = f.beta = &present;
  f.out = f.residual_out = &present;
  f.mean = f.rstd = reinterpret_cast<float*>(&present);
  Task backward;
  backward.kind = TaskKind::kBackward;
  backward.rows = 1;
  backward.hidden = hidden;
  kernels::BackwardArgs& b = backward.backward;
  b.x_dtype = b.param_dtype = kernels::DType::kF32;
  b.x = b.dy = b.gamma = &present;
  b.mean = b.rstd = reinterpret_cast<const float*>(&present);
  b.dx = &present;
  b.dgamma = b.dbeta = reinterpret_cast<float*>(&present);
  return std::max(SliceStagingBytes(forward, 1), SliceStagingBytes(backward, 1));
}

StagingPlan PlanStaging(std::span<const TaskSlice> slices) {
  StagingPlan plan;
  plan.slices.resize(slices.size());
  // Pass 1: the input region's size. Pass 2: offsets.
  int64_t input_end = 0;
  int64_t output_size = 0;
  for (const TaskSlice& slice : slices) {
    StagingOffsets ignored;
    LayOut(
        slice, &ignored, [&](int64_t b) { return input_end += AlignStaging(b), int64_t{0}; },
        [&](int64_t b) { return output_size += AlignStaging(b), int64_t{0}; });
  }
  int64_t in_cursor = 0;
  int64_t out_cursor = input_end;
  for (size_t i = 0; i < slices.size(); ++i) {
    LayOut(
        slices[i], &plan.slices[i],
        [&](int64_t b) {
          const int64_t offset = in_cursor;
          in_cursor += AlignStaging(b);
          return offset;
        },
        [&](int64_t b) {
          const int64_t offset = out_cursor;
          out_cursor += AlignStaging(b);
          return offset;
        });
  }
  plan.input_bytes = input_end;
  plan.total_bytes = input_end + output_size;
  return plan;
}

}  // namespace normsvc::server
