// The GPU executor of one CUDA device (compiled only with CUDA).
//
// Per batch slot (--batches_in_flight of them, one worker thread each): a
// non-blocking stream, a pinned host staging buffer and a device buffer of
// --staging_buffer_bytes, each preceded by room for a segment table, and
// four events: the round's end, and three that time its copies and kernel
// apart on one batch in GpuExecutorOptions::timed_batch_interval. A forward batch is one round:
// pack the inputs into the pinned buffer and the segment table just before them, one H2D copy for
// both, one multi-segment launch, one D2H copy, unpack into the responses. With two or more slots,
// one batch's copies overlap another's kernel. A task larger than the staging buffer runs in
// several rounds of row chunks on its slot; a backward task is one LaunchBackward (its dgamma/dbeta
// chunk partials, if chunked, are summed on the host in chunk order, so results stay
// deterministic).
//
// Registered parameters are uploaded once (Upload) and referenced by device
// pointer. CUDA errors become INTERNAL statuses for the batch; the slot's
// stream is synchronized and the error cleared, and the executor keeps
// serving. An error the context cannot recover from (a sticky one) marks
// the executor unhealthy so the pool stops routing to it.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "server/executor.h"
#include "server/gpu_backend.h"
#include "server/staging_layout.h"

namespace normsvc::server {

class GpuExecutor final : public Executor {
 public:
  static absl::StatusOr<std::unique_ptr<GpuExecutor>> Create(const GpuExecutorOptions& options);
  ~GpuExecutor() override;

  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return static_cast<int>(slots_.size()); }
  int64_t max_batch_staging_bytes() const override { return options_.staging_bytes; }
  BatchResult Run(const Batch& batch, int slot) override;
  absl::StatusOr<DeviceBuffer> Upload(const void* host, std::size_t bytes) override;
  bool healthy() const override { return healthy_.load(std::memory_order_relaxed); }

  // See InjectGpuFaultForNextBatch.
  void InjectFaultForNextBatch() { inject_fault_.store(true); }

 private:
  struct Slot {
    cudaStream_t stream = nullptr;
    // Pinned staging and its device mirror; `table_bytes` before each is
    // room for the segment table, so that the table and the inputs travel
    // in one copy.
    char* host = nullptr;
    char* device = nullptr;
    std::size_t table_bytes = 0;
    void* backward_workspace = nullptr;
    std::size_t backward_workspace_bytes = 0;
    cudaEvent_t start = nullptr, h2d = nullptr, kernel = nullptr;
    cudaEvent_t d2h = nullptr;  // the round's end; created with cudaEventBlockingSync
    bool block = false;         // this batch sleeps on d2h instead of spinning (GpuWait)
    std::vector<kernels::ForwardSegment> segments;  // reused
  };
  struct Timings {
    bool timed = true;  // record the stage events (else only the end event)
    double h2d = 0, kernel = 0, d2h = 0;
  };
  // Sums of dgamma/dbeta over the chunks of one backward task.
  struct GradientSums {
    std::vector<double> dgamma, dbeta;
  };

  explicit GpuExecutor(const GpuExecutorOptions& options) : options_(options) {}
  absl::Status Initialize();
  absl::Status RunRound(std::span<const TaskSlice> slices, Slot& slot, Timings* timings,
                        GradientSums* sums);
  absl::Status RunOversized(const Task& task, Slot& slot, Timings* timings);
  // The slot's workspace (allocated at start, BackwardWorkspaceBound) holds
  // `bytes`; INTERNAL otherwise.
  absl::Status CheckBackwardWorkspace(const Slot& slot, std::size_t bytes) const;
  // After a failed round: wait for the stream, clear the error, and decide
  // whether the device is still usable.
  void Recover(Slot& slot);
  // Waits until the slot's round has finished (slot.d2h): sleeping when
  // slot.block, else spinning on cudaEventQuery.
  static cudaError_t WaitForRound(const Slot& slot);
  void MeasureCopyBandwidth();

  const GpuExecutorOptions options_;
  DeviceDescription device_;
  std::vector<Slot> slots_;
  std::atomic<bool> healthy_{true};
  std::atomic<bool> inject_fault_{false};
  std::atomic<uint64_t> batches_run_{0};  // picks the timed batches
};

}  // namespace normsvc::server
