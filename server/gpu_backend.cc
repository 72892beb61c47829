// The GPU backend's CUDA-free entry points, on top of GpuExecutor.
#include "server/gpu_backend.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
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

absl::Status InjectGpuFaultForNextBatch(Executor& executor) {
  auto* gpu = dynamic_cast<GpuExecutor*>(&executor);
  if (gpu == nullptr) return absl::FailedPreconditionError("not a GPU executor");
  gpu->InjectFaultForNextBatch();
  return absl::OkStatus();
}

}  // namespace normsvc::server
