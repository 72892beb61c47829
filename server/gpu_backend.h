// The GPU backend seen from CUDA-free code: whether it was compiled, how
// many GPUs are visible, and a factory for GpuExecutor. Everything CUDA
// stays behind this header (gpu_executor.cc); without CUDA the stub
// (gpu_backend_stub.cc) reports no GPUs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/executor.h"
#include "server/options.h"

namespace normsvc::server {

struct GpuExecutorOptions {
  int device = 0;                              // CUDA device index
  int executor_index = 0;                      // position in the pool (registered parameters)
  int slots = 2;                               // batches in flight (one stream + staging each)
  int64_t staging_bytes = int64_t{128} << 20;  // pinned host and device bytes per slot
  int64_t max_batch_tasks = 4096;              // segment table capacity
  // The edge's limits (--max_hidden_size, --max_request_rows): each slot's
  // backward workspace is allocated at start for the largest backward chunk
  // they allow through staging_bytes (BackwardWorkspaceBound).
  int64_t max_hidden = 262144;
  int64_t max_request_rows = 1048576;
  GpuWait wait = GpuWait::kAuto;
  // The copies and the kernel are timed apart (three more events on the
  // stream) on one batch in this many, counted over the executor's batches;
  // the others record only the event that ends them. 1: every batch.
  int64_t timed_batch_interval = 1;
};

// True when this build contains the GPU executor.
bool GpuBackendCompiled();
// Visible CUDA devices; 0 without a driver or without the GPU executor.
int VisibleGpuCount();
// "13.0", or "none" without CUDA.
std::string CudaRuntimeVersion();

absl::StatusOr<std::unique_ptr<Executor>> CreateGpuExecutor(const GpuExecutorOptions& options);

// Device memory a batch slot holds for a backward's dgamma/dbeta partials so
// that every backward request the edge accepts runs: the largest
// kernels::BackwardWorkspaceBytes over every H up to `max_hidden` of the
// most rows one chunk of that H can have in a staging buffer of
// `staging_bytes` (x, dy and dx alone take 6 bytes an element or more) and
// in a request (`max_request_rows`). A scan of every H (about 50 ms at
// 2^20): the workspace is not monotone in H, as the kernels' plans split a
// launch's rows differently. 0 without the GPU backend.
int64_t BackwardWorkspaceBound(int64_t staging_bytes, int64_t max_hidden, int64_t max_request_rows);

// kernels::BackwardWorkspaceBytes(rows, hidden), for tests of the bound; 0
// without the GPU backend.
int64_t BackwardChunkWorkspaceBytes(int64_t rows, int64_t hidden);

// Test hook: the next batch `executor` runs fails with a genuine CUDA error
// (an invalid copy is issued), exercising the error path; later batches run
// normally. FAILED_PRECONDITION if `executor` is not a GPU executor.
absl::Status InjectGpuFaultForNextBatch(Executor& executor);

}  // namespace normsvc::server
