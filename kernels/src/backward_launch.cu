// Host side of the backward pass: the row pass's plan and launch, then the
// column reduction of the dgamma / dbeta partials (column_reduce.h).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "column_reduce.h"
#include "kernel_params.h"
#include "kernel_registry.h"
#include "launch_common.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels {
namespace detail {

BackwardKernel FindBackwardKernel(DType x_dtype, const KernelPlan& plan, int64_t hidden, NormOp op,
                                  bool saved_stats, bool aligned) {
  switch (x_dtype) {
    case DType::kF32:
      return FindBackwardKernelF32(plan, hidden, op, saved_stats, aligned);
    case DType::kF16:
      return FindBackwardKernelF16(plan, hidden, op, saved_stats, aligned);
    case DType::kBF16:
      return FindBackwardKernelBF16(plan, hidden, op, saved_stats, aligned);
  }
  return nullptr;
}

BackwardKernel FindRealignBackwardKernel(DType x_dtype, const KernelPlan& plan, NormOp op,
                                         bool saved_stats) {
  switch (x_dtype) {
    case DType::kF32:
      return FindRealignBackwardKernelF32(plan, op, saved_stats);
    case DType::kF16:
      return FindRealignBackwardKernelF16(plan, op, saved_stats);
    case DType::kBF16:
      return FindRealignBackwardKernelBF16(plan, op, saved_stats);
  }
  return nullptr;
}

namespace {

std::atomic<bool> backward_realign_enabled{true};
std::atomic<int64_t> realign_backward_launches{0};

}  // namespace

bool BackwardRealignEnabled() { return backward_realign_enabled.load(std::memory_order_relaxed); }
void SetBackwardRealignEnabled(bool enabled) {
  backward_realign_enabled.store(enabled, std::memory_order_relaxed);
}
int64_t RealignBackwardLaunches() {
  return realign_backward_launches.load(std::memory_order_relaxed);
}

namespace {

// How BackwardRealignKernel would take the rows of `args`: every row of x,
// dy and dx starts at the same offset from a 16-byte boundary (the same
// base offset and, for more than one row, the same row pitch modulo 16
// bytes). Sets the params' realign fields; false when the rows do not share
// their offsets.
bool RowsShareOffsets(const BackwardArgs& args, int width, BackwardParams* params) {
  const std::size_t size = DTypeSize(args.x_dtype);
  const auto offset = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16; };
  const auto pitch = [size](int64_t stride) {
    return static_cast<int64_t>((static_cast<uint64_t>(stride) * size) % 16);
  };
  if (offset(args.dy) != offset(args.x) || offset(args.dx) != offset(args.x)) return false;
  // One row: its pitches are never used (so they choose neither kernel).
  if (args.rows > 1 && (pitch(args.dy_row_stride) != pitch(args.x_row_stride) ||
                        pitch(args.dx_row_stride) != pitch(args.x_row_stride))) {
    return false;
  }
  params->realign_first_shift = static_cast<int32_t>(offset(args.x) / size);
  params->realign_shift_step = static_cast<int32_t>(pitch(args.x_row_stride) / size);
  params->realign_period = RealignPeriod(params->realign_shift_step, width);
  return true;
}

}  // namespace
}  // namespace detail

namespace {

// The most units any backward launch of at most `rows` rows of `hidden`
// elements splits its rows into, over every dtype, op and kernel, from the unit
// planners' rules: PlanBackwardUnits gives at most min(wave, row groups)
// units; PlanRealignedBackwardUnits, for `classes` offset classes of
// ceil(rows / period) rows, at most min(max(wave, classes), classes x row
// groups of a class). Each term is non-decreasing in `rows`, so the bound is.
int64_t MostBackwardUnits(int64_t rows, int64_t hidden) {
  int64_t units = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      const detail::KernelPlan plan = detail::PlanBackward(hidden, dtype, op);
      units = std::max(units, std::min(detail::BackwardWaveUnits(plan, dtype),
                                       (rows + plan.groups - 1) / plan.groups));
    }
    const detail::KernelPlan realign = detail::PlanBackwardRealign(hidden, dtype);
    if (realign.slots == 0) continue;
    const int64_t wave =
        detail::kBackwardWaveUnits * detail::RealignBackwardResidentBlocks(realign, hidden);
    for (int period = 1; period <= detail::VectorWidth(dtype); period *= 2) {
      const int64_t classes = std::min<int64_t>(period, rows);
      const int64_t class_groups =
          ((rows + period - 1) / period + realign.groups - 1) / realign.groups;
      units = std::max(units, std::min(std::max(wave, classes), classes * class_groups));
    }
  }
  return units;
}

}  // namespace

std::size_t BackwardWorkspaceBytes(int64_t rows, int64_t hidden) {
  if (rows <= 0 || hidden <= 0 || hidden > kMaxHidden) return 0;
  const std::size_t bytes =
      static_cast<std::size_t>(2 * MostBackwardUnits(rows, hidden) * hidden) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

namespace {

// The fields of `params` that every backward launch takes from `args`, its
// plan and its `units` rows of partials in `workspace` (dgamma's, then
// dbeta's). The unit split and `vectorized` are the caller's.
void FillBackwardParams(const BackwardArgs& args, const detail::KernelPlan& plan, int64_t units,
                        void* workspace, detail::BackwardParams* params) {
  float* partials = static_cast<float*>(workspace);
  params->x = args.x;
  params->dy = args.dy;
  params->gamma = args.gamma;
  params->mean = args.mean;
  params->rstd = args.rstd;
  params->dx = args.dx;
  params->dgamma_partial = args.dgamma != nullptr ? partials : nullptr;
  params->dbeta_partial = args.dbeta != nullptr ? partials + units * args.hidden : nullptr;
  params->x_stride = args.x_row_stride;
  params->dy_stride = args.dy_row_stride;
  params->dx_stride = args.dx_row_stride;
  params->rows = args.rows;
  params->hidden = static_cast<int32_t>(args.hidden);
  params->epsilon = args.epsilon;
  params->shape = detail::ShapeOf(plan);
  params->op = static_cast<uint8_t>(args.op);
  params->param_dtype = static_cast<uint8_t>(args.param_dtype);
}

// The rows of `args` (at least one, sharing their offsets: RowsShareOffsets
// filled params' realign fields) on BackwardRealignKernel, then stage 2.
Status LaunchRealignedBackward(const BackwardArgs& args, const detail::KernelPlan& plan,
                               void* device_workspace, std::size_t workspace_bytes,
                               detail::BackwardParams* params, cudaStream_t stream) {
  const int64_t h = args.hidden;
  const detail::RealignedBackwardUnits units =
      detail::PlanRealignedBackwardUnits(args.rows, h, plan, params->realign_period);
  const bool wants_partials = args.dgamma != nullptr || args.dbeta != nullptr;
  if (wants_partials &&
      static_cast<std::size_t>(2 * units.units * h) * sizeof(float) > workspace_bytes) {
    return Status(Code::kInternal, "the realigned backward's partials exceed the workspace");
  }
  FillBackwardParams(args, plan, units.units, device_workspace, params);
  params->rows_per_unit = units.class_rows_per_unit;
  params->units_per_class = units.units_per_class;
  params->vectorized = 1;
  const detail::BackwardKernel kernel =
      detail::FindRealignBackwardKernel(args.x_dtype, plan, args.op, args.rstd != nullptr);
  const std::size_t dynamic_smem = detail::RealignBackwardSmemBytes(plan, h);
  // Raises the kernel's shared memory limit (once); 0 when even one block cannot run.
  if (kernel != nullptr && detail::ResidentBlocks(reinterpret_cast<const void*>(kernel),
                                                  plan.block_threads, dynamic_smem) == 0) {
    return Status(Code::kInternal, "the realigned backward kernel cannot run on this device (" +
                                       std::to_string(dynamic_smem) +
                                       " bytes of shared memory a block)");
  }
  if (Status st = detail::LaunchWithPlan(kernel, plan, units.units, dynamic_smem, *params, stream,
                                         /*early_launch=*/true);
      !st.ok()) {
    return st;
  }
  detail::realign_backward_launches.fetch_add(1, std::memory_order_relaxed);
  if (!wants_partials) return Status::Ok();
  return detail::LaunchColumnReduction(args, *params, units.units, stream);
}

}  // namespace

Status LaunchBackward(const BackwardArgs& args, void* device_workspace, std::size_t workspace_bytes,
                      cudaStream_t stream) {
  if (Status st = ValidateBackwardArgs(args); !st.ok()) return st;
  const int64_t h = args.hidden;
  if (args.rows == 0) {
    // A sum over no rows.
    for (float* out : {args.dgamma, args.dbeta}) {
      if (out == nullptr) continue;
      if (Status st = detail::FromCuda("dgamma/dbeta clear",
                                       cudaMemsetAsync(out, 0, h * sizeof(float), stream));
          !st.ok()) {
        return st;
      }
    }
    return Status::Ok();
  }
  const detail::KernelPlan plan = detail::PlanBackward(h, args.x_dtype, args.op);
  const detail::BackwardUnits units =
      detail::PlanBackwardUnits(args.rows, h, args.x_dtype, args.op);
  const bool wants_partials = args.dgamma != nullptr || args.dbeta != nullptr;
  if (wants_partials) {
    const std::size_t required = BackwardWorkspaceBytes(args.rows, h);
    if (device_workspace == nullptr || workspace_bytes < required) {
      return detail::InvalidArgument(
          "backward needs a device workspace of BackwardWorkspaceBytes(" +
          std::to_string(args.rows) + ", " + std::to_string(h) + ") = " + std::to_string(required) +
          " bytes, got " + std::to_string(device_workspace ? workspace_bytes : 0));
    }
    if (reinterpret_cast<std::uintptr_t>(device_workspace) % 16 != 0) {
      return detail::InvalidArgument(
          "backward's device workspace must be 16-byte aligned (cudaMalloc's allocations are)");
    }
  }

  detail::BackwardParams params = {};
  const detail::KernelPlan realign = detail::PlanBackwardRealign(h, args.x_dtype);
  if (realign.slots > 0 && detail::BackwardRealignEnabled() &&
      detail::RowsShareOffsets(args, realign.width, &params)) {
    return LaunchRealignedBackward(args, realign, device_workspace, workspace_bytes, &params,
                                   stream);
  }
  FillBackwardParams(args, plan, units.units, device_workspace, &params);
  params.rows_per_unit = units.rows_per_unit;
  params.vectorized = plan.layout == detail::Layout::kVector &&
                      detail::AllowsVectors(args.x, args.rows, args.x_row_stride, args.x_dtype) &&
                      detail::AllowsVectors(args.dy, args.rows, args.dy_row_stride, args.x_dtype) &&
                      detail::AllowsVectors(args.dx, args.rows, args.dx_row_stride, args.x_dtype) &&
                      detail::AllowsVectors(args.gamma, 1, 0, args.param_dtype);

  const detail::BackwardKernel kernel = detail::FindBackwardKernel(
      args.x_dtype, plan, h, args.op, args.rstd != nullptr, params.vectorized != 0);
  const std::size_t dynamic_smem = detail::BackwardDynamicSmemBytes(plan);
  if (detail::UsesStagedBackward(plan)) {
    // Raises the kernel's shared memory limit (once); 0 when even one block cannot run.
    const int64_t resident = kernel == nullptr
                                 ? 0
                                 : detail::ResidentBlocks(reinterpret_cast<const void*>(kernel),
                                                          plan.block_threads, dynamic_smem);
    if (kernel != nullptr && resident == 0) {
      return Status(Code::kInternal, "the staged backward kernel cannot run on this device (" +
                                         std::to_string(dynamic_smem) +
                                         " bytes of shared memory a block)");
    }
  }
  // Early launch: the backward kernels honour grid_dependency.cuh's contract.
  if (Status st = detail::LaunchWithPlan(kernel, plan, units.units * plan.cluster, dynamic_smem,
                                         params, stream, /*early_launch=*/true);
      !st.ok()) {
    return st;
  }
  if (!wants_partials) return Status::Ok();
  return detail::LaunchColumnReduction(args, params, units.units, stream);
}

}  // namespace normsvc::kernels
