// Host side of the backward pass, and the column reduction of the dgamma /
// dbeta partials (stage 2, fixed order, no atomics).
#include <algorithm>
#include <string>

#include "grid_dependency.cuh"
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

namespace {

constexpr int kReduceColumns = 32;
constexpr int kReduceSlices = 32;

// out[c] = sum over u of partial[u][c], u in increasing order within each of
// kReduceSlices interleaved slices, then the slices in order. blockIdx.y
// selects dgamma (0) or dbeta (1). Launched early (programmatic dependent
// launch): it waits for the partials' kernel before reading them.
__global__ void __launch_bounds__(kReduceColumns* kReduceSlices)
    ColumnReduceKernel(const float* dgamma_partial, const float* dbeta_partial, int64_t units,
                       int32_t hidden, float* dgamma, float* dbeta) {
  __shared__ float slices[kReduceSlices][kReduceColumns + 1];
  WaitForPriorGrids();
  const float* partial = blockIdx.y == 0 ? dgamma_partial : dbeta_partial;
  float* out = blockIdx.y == 0 ? dgamma : dbeta;
  if (partial == nullptr || out == nullptr) return;  // uniform over the block
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kReduceColumns + threadIdx.x;
  float total = 0.0f;
  if (column < hidden) {
    // Unrolled so that several loads are in flight; the additions keep their order.
#pragma unroll 4
    for (int64_t u = threadIdx.y; u < units; u += kReduceSlices) {
      total += partial[u * hidden + column];
    }
  }
  slices[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && column < hidden) {
    float sum = slices[0][threadIdx.x];
    for (int s = 1; s < kReduceSlices; ++s) sum += slices[s][threadIdx.x];
    out[column] = sum;
  }
}

}  // namespace
}  // namespace detail

std::size_t BackwardWorkspaceBytes(int64_t rows, int64_t hidden) {
  if (rows <= 0 || hidden <= 0 || hidden > kMaxHidden) return 0;
  int64_t units = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    units = std::max(units, detail::PlanBackwardUnits(rows, hidden, dtype).units);
  }
  const std::size_t bytes = static_cast<std::size_t>(2 * units * hidden) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

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
  const detail::KernelPlan plan = detail::PlanBackward(h, args.x_dtype);
  const detail::BackwardUnits units = detail::PlanBackwardUnits(args.rows, h, args.x_dtype);
  const bool wants_partials = args.dgamma != nullptr || args.dbeta != nullptr;
  if (wants_partials) {
    const std::size_t required = BackwardWorkspaceBytes(args.rows, h);
    if (device_workspace == nullptr || workspace_bytes < required) {
      return detail::InvalidArgument(
          "backward needs a device workspace of BackwardWorkspaceBytes(" +
          std::to_string(args.rows) + ", " + std::to_string(h) + ") = " + std::to_string(required) +
          " bytes, got " + std::to_string(device_workspace ? workspace_bytes : 0));
    }
  }

  detail::BackwardParams params = {};
  params.x = args.x;
  params.dy = args.dy;
  params.gamma = args.gamma;
  params.mean = args.mean;
  params.rstd = args.rstd;
  params.dx = args.dx;
  float* workspace = static_cast<float*>(device_workspace);
  params.dgamma_partial = args.dgamma != nullptr ? workspace : nullptr;
  params.dbeta_partial = args.dbeta != nullptr ? workspace + units.units * h : nullptr;
  params.x_stride = args.x_row_stride;
  params.dy_stride = args.dy_row_stride;
  params.dx_stride = args.dx_row_stride;
  params.rows = args.rows;
  params.rows_per_unit = units.rows_per_unit;
  params.hidden = static_cast<int32_t>(h);
  params.epsilon = args.epsilon;
  params.shape = detail::ShapeOf(plan);
  params.op = static_cast<uint8_t>(args.op);
  params.param_dtype = static_cast<uint8_t>(args.param_dtype);
  params.vectorized = plan.layout == detail::Layout::kVector &&
                      detail::AllowsVectors(args.x, args.rows, args.x_row_stride, args.x_dtype) &&
                      detail::AllowsVectors(args.dy, args.rows, args.dy_row_stride, args.x_dtype) &&
                      detail::AllowsVectors(args.dx, args.rows, args.dx_row_stride, args.x_dtype) &&
                      detail::AllowsVectors(args.gamma, 1, 0, args.param_dtype);

  const detail::BackwardKernel kernel = detail::FindBackwardKernel(
      args.x_dtype, plan, h, args.op, args.rstd != nullptr, params.vectorized != 0);
  std::size_t dynamic_smem = 0;
  if (detail::UsesStagedBackward(plan)) {
    dynamic_smem = detail::BackwardStagedSmemBytes(plan.block_threads, plan.slots);
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
  } else if (plan.layout != detail::Layout::kStreamed && plan.groups > 1) {
    dynamic_smem =
        static_cast<std::size_t>(plan.block_threads) * plan.slots * plan.width * sizeof(float);
  }
  if (Status st = detail::LaunchWithPlan(kernel, plan, units.units * plan.cluster, dynamic_smem,
                                         params, stream);
      !st.ok()) {
    return st;
  }
  if (!wants_partials) return Status::Ok();
  cudaLaunchConfig_t config = {};
  config.gridDim =
      dim3(static_cast<unsigned>((h + detail::kReduceColumns - 1) / detail::kReduceColumns), 2);
  config.blockDim = dim3(detail::kReduceColumns, detail::kReduceSlices);
  config.stream = stream;
  cudaLaunchAttribute early = {};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &early;
  config.numAttrs = 1;
  return detail::FromCuda("column reduction launch",
                          cudaLaunchKernelEx(&config, detail::ColumnReduceKernel,
                                             static_cast<const float*>(params.dgamma_partial),
                                             static_cast<const float*>(params.dbeta_partial),
                                             units.units, params.hidden, args.dgamma, args.dbeta));
}

}  // namespace normsvc::kernels
