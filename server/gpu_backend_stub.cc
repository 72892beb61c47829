// The GPU backend when the build has no CUDA kernels: no devices.
#include "server/gpu_backend.h"

namespace normsvc::server {

bool GpuBackendCompiled() { return false; }
int VisibleGpuCount() { return 0; }
std::string CudaRuntimeVersion() { return "none"; }

absl::StatusOr<std::unique_ptr<Executor>> CreateGpuExecutor(const GpuExecutorOptions&) {
  return absl::FailedPreconditionError("this build of normsvc has no CUDA backend");
}

int64_t BackwardWorkspaceBound(int64_t, int64_t, int64_t) { return 0; }
int64_t BackwardChunkWorkspaceBytes(int64_t, int64_t) { return 0; }

absl::Status InjectGpuFaultForNextBatch(Executor&) {
  return absl::FailedPreconditionError("this build of normsvc has no CUDA backend");
}

}  // namespace normsvc::server
