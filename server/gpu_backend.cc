// The GPU backend's CUDA-free entry points, on top of GpuExecutor.
#include "server/gpu_backend.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "normsvc/kernels/gpu.h"
#include "server/gpu_executor.h"

namespace normsvc::server {

bool GpuBackendCompiled() { return true; }

int VisibleGpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string CudaRuntimeVersion() {
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) return "unknown";
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

absl::StatusOr<std::unique_ptr<Executor>> CreateGpuExecutor(const GpuExecutorOptions& options) {
  absl::StatusOr<std::unique_ptr<GpuExecutor>> executor = GpuExecutor::Create(options);
  if (!executor.ok()) return executor.status();
  return std::unique_ptr<Executor>(*std::move(executor));
}

int64_t BackwardWorkspaceBound(int64_t staging_bytes, int64_t max_hidden,
                               int64_t max_request_rows) {
  std::size_t most = 0;
  const int64_t last = std::min<int64_t>(max_hidden, kernels::kMaxHidden);
  for (int64_t hidden = 1; hidden <= last; ++hidden) {
    const int64_t rows = std::min(max_request_rows, staging_bytes / (6 * hidden));
    if (rows <= 0) break;  // fewer still for longer rows
    most = std::max(most, kernels::BackwardWorkspaceBytes(rows, hidden));
  }
  return static_cast<int64_t>(most);
}

int64_t BackwardChunkWorkspaceBytes(int64_t rows, int64_t hidden) {
  return static_cast<int64_t>(kernels::BackwardWorkspaceBytes(rows, hidden));
}

absl::Status InjectGpuFaultForNextBatch(Executor& executor) {
  auto* gpu = dynamic_cast<GpuExecutor*>(&executor);
  if (gpu == nullptr) return absl::FailedPreconditionError("not a GPU executor");
  gpu->InjectFaultForNextBatch();
  return absl::OkStatus();
}

}  // namespace normsvc::server
