// Helpers shared by the host launchers (forward_launch.cu, backward_launch.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "alignment.h"
#include "kernel_params.h"
#include "launch_plan.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

inline Status InvalidArgument(std::string message) {
  return Status(Code::kInvalidArgument, std::move(message));
}

inline Status FromCuda(const char* what, cudaError_t error) {
  if (error == cudaSuccess) return Status::Ok();
  return Status(error == cudaErrorMemoryAllocation ? Code::kResourceExhausted : Code::kInternal,
                std::string(what) + ": " + cudaGetErrorString(error));
}

inline RowShape ShapeOf(const KernelPlan& plan) {
  RowShape shape;
  shape.row_threads = plan.row_threads;
  shape.groups = plan.groups;
  shape.cluster = plan.cluster;
  return shape;
}

// Sets `kernel`'s dynamic shared memory limit to kMaxDynamicSmem or to the
// current device's opt-in limit less the kernel's static shared memory,
// whichever is less, and stores it in `limit` (0 on an error).
cudaError_t RaiseDynamicSmemLimit(const void* kernel, std::size_t* limit);

// Blocks of `kernel` (of `block_threads` threads, `dynamic_smem` bytes of
// dynamic shared memory) that fit on the current device at once: resident
// blocks per SM times the SM count. Raises the kernel's dynamic shared memory
// limit on first use to kMaxDynamicSmem (launch_plan.h) or to the device's
// opt-in limit less the kernel's static shared memory, whichever is less; 0
// when `dynamic_smem` passes that. Cached per (device, kernel, block
// size, shared memory); 0 when a query fails.
int64_t ResidentBlocks(const void* kernel, int block_threads, std::size_t dynamic_smem);

// Clusters of `cluster` blocks of `kernel` that fit on the current device at
// once (cudaOccupancyMaxActiveClusters: a cluster's blocks must share one
// GPC, so fewer than ResidentBlocks / cluster: 15, not 16, clusters of 8 at
// one block a multiprocessor on the H200). Raises the shared memory limit
// and caches as ResidentBlocks does; 0 when a query fails or none fits.
int64_t ResidentClusters(const void* kernel, int block_threads, int cluster,
                         std::size_t dynamic_smem);

// The current device's multiprocessor count (cached; 0 when the query fails).
int64_t MultiprocessorCount();

// Launches `kernel` with `blocks` blocks of the plan's size, as clusters of
// plan.cluster blocks when that is more than one. `early_launch`: the launch
// may be scheduled before the previous kernel in the stream has finished
// (programmatic dependent launch); only for kernels that honour the contract
// in grid_dependency.cuh.
template <typename Params>
Status LaunchWithPlan(void (*kernel)(Params), const KernelPlan& plan, int64_t blocks,
                      std::size_t dynamic_smem, const Params& params, cudaStream_t stream,
                      bool early_launch = false) {
  if (kernel == nullptr) return Status(Code::kInternal, "no kernel instantiation for this plan");
  if (blocks <= 0) return Status::Ok();
  if (blocks > INT32_MAX) return InvalidArgument("too many rows for one launch");
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(plan.block_threads));
  config.dynamicSmemBytes = dynamic_smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (plan.cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = static_cast<unsigned>(plan.cluster);
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (early_launch) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = count > 0 ? attributes : nullptr;
  config.numAttrs = count;
  return FromCuda("kernel launch", cudaLaunchKernelEx(&config, kernel, params));
}

}  // namespace normsvc::kernels::detail
