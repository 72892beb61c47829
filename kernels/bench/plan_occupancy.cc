// plan_occupancy: what the device holds at once of each benchmark shape's
// kernels, as the CUDA runtime reports it, next to the backward unit
// planner's model (BackwardResidentBlocks, PlanBackwardUnits).
//
// Why: the backward's unit count is chosen from a model of occupancy
// (launch_plan.cc), and rows that span a cluster of blocks are also limited
// by how many clusters the hardware can place at once (a cluster's blocks
// must share one GPC), which the per-multiprocessor block count does not
// show. This prints both for every plan of the benchmark's large shapes, so
// the model can be checked against the device. Diagnostic only: nothing in
// the kernels reads these numbers.
//
// Usage: plan_occupancy [--json PATH]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_registry.h"
#include "launch_common.h"
#include "launch_plan.h"
#include "normsvc/kernels/types.h"

namespace {

using normsvc::kernels::DType;
using normsvc::kernels::NormOp;
namespace detail = normsvc::kernels::detail;

struct Row {
  std::string direction;
  std::string dtype;
  int64_t rows = 0;
  int64_t hidden = 0;
  std::string plan;
  int block_threads = 0;
  int cluster = 1;
  std::size_t dynamic_smem = 0;
  int blocks_per_sm = -1;        // cudaOccupancyMaxActiveBlocksPerMultiprocessor
  int active_clusters = -1;      // cudaOccupancyMaxActiveClusters (cluster plans)
  int model_blocks_per_sm = -1;  // BackwardResidentBlocks (backward)
  int64_t units = -1;            // PlanBackwardUnits (backward)
  std::string error;
};

const char* DTypeText(DType dtype) { return dtype == DType::kBF16 ? "bf16" : "fp32"; }

std::string PlanText(const detail::KernelPlan& plan) {
  const char* layout = plan.layout == detail::Layout::kVector    ? "vector"
                       : plan.layout == detail::Layout::kStrided ? "strided"
                       : plan.layout == detail::Layout::kStaged  ? "staged"
                                                                 : "streamed";
  return std::string(layout) + " V" + std::to_string(plan.slots) + " W" +
         std::to_string(plan.width) + " RT" + std::to_string(plan.row_threads) + " G" +
         std::to_string(plan.groups) + " K" + std::to_string(plan.cluster);
}

// Fills the runtime's figures for `kernel` launched as `row` says.
void Query(const void* kernel, Row& row) {
  if (kernel == nullptr) {
    row.error = "no kernel for this plan";
    return;
  }
  std::size_t limit = 0;
  if (detail::RaiseDynamicSmemLimit(kernel, &limit) != cudaSuccess) {
    row.error = cudaGetErrorString(cudaGetLastError());
    return;
  }
  if (row.dynamic_smem > limit) {
    row.error = "needs more dynamic shared memory than the device allows a block";
    return;
  }
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&row.blocks_per_sm, kernel, row.block_threads,
                                                    row.dynamic_smem) != cudaSuccess) {
    row.error = cudaGetErrorString(cudaGetLastError());
    return;
  }
  if (row.cluster <= 1) return;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(row.cluster * 64));
  config.blockDim = dim3(static_cast<unsigned>(row.block_threads));
  config.dynamicSmemBytes = row.dynamic_smem;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(row.cluster);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  if (cudaOccupancyMaxActiveClusters(&row.active_clusters, kernel, &config) != cudaSuccess) {
    row.error = cudaGetErrorString(cudaGetLastError());
  }
}

// A forward or backward row of the report for `plan`, with the runtime's
// figures for the kernel that serves it (gamma in the x dtype; backward: the
// row's op with saved statistics, 16-byte accesses where H allows).
Row ForwardRow(DType dtype, int64_t rows, int64_t hidden) {
  const detail::KernelPlan plan = detail::PlanForward(hidden, dtype);
  Row row{"forward",      DTypeText(dtype),   rows,        hidden,
          PlanText(plan), plan.block_threads, plan.cluster};
  if (plan.layout == detail::Layout::kStaged)
    row.dynamic_smem = detail::StagedForwardSmemBytes(plan);
  // A contiguous tensor whose H is not a multiple of the vector width has
  // misaligned rows, which the realigning kernel or the general one serves.
  const detail::ForwardPath path =
      detail::ChooseForwardPath(plan, dtype, dtype, hidden % plan.width == 0, true, true);
  Query(reinterpret_cast<const void*>(
            detail::FindForwardKernel(dtype, plan, path, dtype, /*single=*/true)),
        row);
  return row;
}

Row BackwardRow(const char* direction, NormOp op, DType dtype, int64_t rows, int64_t hidden) {
  const detail::KernelPlan plan = detail::PlanBackward(hidden, dtype, op);
  Row row{direction,      DTypeText(dtype),   rows,        hidden,
          PlanText(plan), plan.block_threads, plan.cluster};
  row.dynamic_smem = detail::BackwardDynamicSmemBytes(plan);
  row.model_blocks_per_sm = detail::BackwardResidentBlocks(plan, dtype);
  row.units = detail::PlanBackwardUnits(rows, hidden, dtype, op).units;
  const bool aligned = hidden % detail::VectorWidth(dtype) == 0;
  Query(reinterpret_cast<const void*>(
            detail::FindBackwardKernel(dtype, plan, hidden, op, /*saved_stats=*/true, aligned)),
        row);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: plan_occupancy [--json PATH]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  cudaDeviceProp prop = {};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "plan_occupancy: no CUDA device: %s\n",
                 cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  constexpr int64_t kElements = int64_t{1} << 24;  // the benchmark's large shapes
  const int64_t hiddens[] = {768, 1024, 2049, 4096, 8192, 16384, 65536};
  std::vector<Row> rows;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (int64_t hidden : hiddens) {
      const int64_t row_count = (kElements + hidden - 1) / hidden;
      rows.push_back(ForwardRow(dtype, row_count, hidden));
      rows.push_back(BackwardRow("backward", NormOp::kLayerNorm, dtype, row_count, hidden));
      // RMSNorm's own row where its plan differs (PlanBackward).
      if (PlanText(detail::PlanBackward(hidden, dtype, NormOp::kRmsNorm)) !=
          PlanText(detail::PlanBackward(hidden, dtype, NormOp::kLayerNorm))) {
        rows.push_back(BackwardRow("bwd-rms", NormOp::kRmsNorm, dtype, row_count, hidden));
      }
    }
  }

  // Every backward cluster plan (cluster size, kernel, blocks a
  // multiprocessor) that PlanBackward makes for H up to kMaxHidden, at the
  // first H that makes it, for 1,024 rows (LayerNorm's, then RMSNorm's not
  // seen; a plan whose kernel loads statistics in batches is its own).
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    std::vector<std::string> seen;
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      for (int64_t hidden = 1; hidden <= normsvc::kernels::kMaxHidden; ++hidden) {
        const detail::KernelPlan plan = detail::PlanBackward(hidden, dtype, op);
        if (plan.cluster <= 1) continue;
        const bool staged = detail::UsesStagedBackward(plan);
        const std::string key = PlanText(plan).substr(0, PlanText(plan).find(" RT")) +
                                (staged ? " staged" : " rows") + " K" +
                                std::to_string(plan.cluster) +
                                (detail::BatchesSavedStatistics(plan, dtype, op) ? " batched" : "");
        bool known = false;
        for (const std::string& k : seen) known = known || k == key;
        if (known) continue;
        seen.push_back(key);
        rows.push_back(
            BackwardRow(op == NormOp::kLayerNorm ? "backward-cluster" : "bwd-rms-cluster", op,
                        dtype, 1024, hidden));
      }
    }
  }

  std::printf("device: %s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);
  std::printf("%-8s %-5s %13s %-28s %6s %2s %7s %6s %8s %6s %6s %s\n", "dir", "dtype", "rows x H",
              "plan", "thr", "K", "smem", "blk/SM", "clusters", "model", "units", "note");
  for (const Row& r : rows) {
    const std::string shape = std::to_string(r.rows) + " x " + std::to_string(r.hidden);
    std::printf("%-8s %-5s %13s %-28s %6d %2d %7zu %6d %8d %6d %6lld %s\n", r.direction.c_str(),
                r.dtype.c_str(), shape.c_str(), r.plan.c_str(), r.block_threads, r.cluster,
                r.dynamic_smem, r.blocks_per_sm, r.active_clusters, r.model_blocks_per_sm,
                static_cast<long long>(r.units), r.error.c_str());
  }
  if (json_path != nullptr) {
    FILE* f = std::fopen(json_path, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "plan_occupancy: cannot write %s\n", json_path);
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"sm_count\": %d, \"records\": [\n", prop.name,
                 prop.multiProcessorCount);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "  {\"direction\": \"%s\", \"dtype\": \"%s\", \"rows\": %lld, \"hidden\": %lld, "
                   "\"plan\": \"%s\", \"block_threads\": %d, \"cluster\": %d, \"dynamic_smem\": "
                   "%zu, \"blocks_per_sm\": %d, \"active_clusters\": %d, "
                   "\"model_blocks_per_sm\": %d, \"units\": %lld, \"error\": \"%s\"}%s\n",
                   r.direction.c_str(), r.dtype.c_str(), static_cast<long long>(r.rows),
                   static_cast<long long>(r.hidden), r.plan.c_str(), r.block_threads, r.cluster,
                   r.dynamic_smem, r.blocks_per_sm, r.active_clusters, r.model_blocks_per_sm,
                   static_cast<long long>(r.units), r.error.c_str(),
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
