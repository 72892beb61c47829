// The CPU backend: runs batches on the reference kernels (double-precision
// accumulation), reading requests and writing responses in place. Used when
// no GPU is present, or chosen with --backend=cpu.
#pragma once

#include "server/executor.h"

namespace normsvc::server {

struct CpuExecutorOptions {
  int executor_index = 0;     // position in the pool (for registered parameters)
  int slots = 2;              // batches run concurrently
  int threads_per_batch = 0;  // 0: hardware threads / slots
};

class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(const CpuExecutorOptions& options);

  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return options_.slots; }
  int64_t max_batch_staging_bytes() const override { return 0; }
  BatchResult Run(const Batch& batch, int slot) override;
  absl::StatusOr<DeviceBuffer> Upload(const void* host, std::size_t bytes) override;
  bool healthy() const override { return true; }

 private:
  // Run's work; std::bad_alloc may leave it (Run turns it into statuses).
  BatchResult RunOnReference(const Batch& batch);

  CpuExecutorOptions options_;
  DeviceDescription device_;
};

}  // namespace normsvc::server
