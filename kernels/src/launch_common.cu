// Occupancy queries for the persistent launches, cached: the launch path
// must stay cheap for one-row batches.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <tuple>
#include <vector>

#include "launch_common.h"

namespace normsvc::kernels::detail {

cudaError_t RaiseDynamicSmemLimit(const void* kernel, std::size_t* limit) {
  *limit = 0;
  int device = 0;
  int optin = 0;
  cudaFuncAttributes attributes = {};
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (error == cudaSuccess) error = cudaFuncGetAttributes(&attributes, kernel);
  if (error != cudaSuccess) return error;
  const std::size_t room = static_cast<std::size_t>(optin) > attributes.sharedSizeBytes
                               ? static_cast<std::size_t>(optin) - attributes.sharedSizeBytes
                               : 0;
  const std::size_t value = std::min(kMaxDynamicSmem, room);
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(value));
  if (error == cudaSuccess) *limit = value;
  return error;
}

namespace {

// Blocks (cluster 1) or clusters of `kernel` that fit on the current device
// at once, cached per (device, kernel, block size, cluster, shared memory).
int64_t CachedOccupancy(const void* kernel, int block_threads, int cluster,
                        std::size_t dynamic_smem) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  using Key = std::tuple<int, const void*, int, int, std::size_t>;
  static std::mutex mutex;
  static std::vector<std::pair<Key, int64_t>> cache;
  const Key key{device, kernel, block_threads, cluster, dynamic_smem};
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [k, value] : cache) {
      if (k == key) return value;
    }
  }
  std::size_t limit = 0;
  if (RaiseDynamicSmemLimit(kernel, &limit) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later checks see only their own
    return 0;
  }
  // More than the limit: the launch would fail, so none fits (cached too).
  int64_t value = 0;
  if (dynamic_smem <= limit && cluster <= 1) {
    int per_sm = 0;
    int sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads,
                                                      dynamic_smem) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    value = static_cast<int64_t>(per_sm) * sms;
  } else if (dynamic_smem <= limit) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(cluster));
    config.blockDim = dim3(static_cast<unsigned>(block_threads));
    config.dynamicSmemBytes = dynamic_smem;
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    value = clusters;
  }
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace_back(key, value);
  return value;
}

}  // namespace

int64_t ResidentBlocks(const void* kernel, int block_threads, std::size_t dynamic_smem) {
  return CachedOccupancy(kernel, block_threads, 1, dynamic_smem);
}

int64_t ResidentClusters(const void* kernel, int block_threads, int cluster,
                         std::size_t dynamic_smem) {
  return CachedOccupancy(kernel, block_threads, cluster, dynamic_smem);
}

int64_t MultiprocessorCount() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  static std::mutex mutex;
  static std::vector<std::pair<int, int64_t>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [d, value] : cache) {
    if (d == device) return value;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cache.emplace_back(device, sms);
  return sms;
}

}  // namespace normsvc::kernels::detail
