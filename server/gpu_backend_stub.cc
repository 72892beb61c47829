// The GPU backend when the build has no CUDA kernels: no devices.
#include "server/gpu_backend.h"

namespace normsvc::server {

bool GpuBackendCompiled() { return false; }
int VisibleGpuCount() { return 0; }
std::string CudaRuntimeVersion() { return "none"; }

absl::StatusOr<std::unique_ptr<Executor>> CreateGpuExecutor(const GpuExecutorOptions&) {
  return absl::FailedPreconditionError("this build of normsvc has no CUDA backend");
}

absl::Status InjectGpuFaultForNextBatch(Executor&) {
  return absl::FailedPreconditionError("this build of normsvc has no CUDA backend");
}

}  // namespace normsvc::server
