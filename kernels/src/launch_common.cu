// Occupancy queries for the persistent launches, cached: the launch path
// must stay cheap for one-row batches.
#include <cuda_runtime.h>

#include <mutex>
#include <tuple>
#include <vector>

#include "launch_common.h"

namespace normsvc::kernels::detail {

int64_t ResidentBlocks(const void* kernel, int block_threads) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  using Key = std::tuple<int, const void*, int>;
  static std::mutex mutex;
  static std::vector<std::pair<Key, int64_t>> cache;
  const Key key{device, kernel, block_threads};
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [k, value] : cache) {
      if (k == key) return value;
    }
  }
  int per_sm = 0;
  int sms = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, 0) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later checks see only their own
    return 0;
  }
  const int64_t value = static_cast<int64_t>(per_sm) * sms;
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace_back(key, value);
  return value;
}

}  // namespace normsvc::kernels::detail
