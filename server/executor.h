// The executor interface: runs closed batches on one device. The batcher
// and its workers know executors only through this; RPC handlers never see
// them. Implementations: CpuExecutor (the reference kernels) and GpuExecutor
// (CUDA, one per device).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/task.h"

namespace normsvc::server {

// Memory an executor allocated for a registered parameter tensor: a pointer
// usable by that executor's kernels, released by the deleter.
using DeviceBuffer = std::shared_ptr<void>;

struct BatchResult {
  std::vector<absl::Status> statuses;  // one per task, in batch order
  // Stage timings from the device (CUDA events); absent where a stage does
  // not exist (the CPU executor has no copies), and all three absent with
  // stages_untimed where the executor skipped timing this batch (it times
  // one batch in GpuExecutorOptions::timed_batch_interval).
  std::optional<double> h2d_seconds;
  std::optional<double> kernel_seconds;
  std::optional<double> d2h_seconds;
  bool stages_untimed = false;
  int64_t kernel_bytes = 0;  // bytes the kernels read and wrote
  // The wall-clock interval of Executor::Run, stamped by the batch worker
  // (ExecuteBatch), not by the executor.
  absl::Time run_started_at;
  absl::Time run_finished_at;
};

// What GetServerInfo and the metrics say about an executor's device.
struct DeviceDescription {
  std::string label;  // metric label: "cpu", "cuda:0", ...
  int index = -1;     // CUDA device index; -1 for the CPU
  std::string name;
  int64_t memory_total_bytes = 0;
  std::string compute_capability;
  std::string pci_bus_id;                      // for NVML
  int64_t device_buffer_bytes = 0;             // device memory the executor holds for batches
  int64_t backward_workspace_bytes = 0;        // of it, each slot's backward workspace
  double copy_bandwidth_bytes_per_second = 0;  // measured at start-up (read + write)
};

class Executor {
 public:
  virtual ~Executor() = default;

  virtual const DeviceDescription& device() const = 0;
  // Number of Run calls that may proceed concurrently, each with its own
  // `slot` in [0, slots()): the batches in flight.
  virtual int slots() const = 0;
  // Largest staging footprint (Task::staging_bytes summed) of one batch;
  // 0 means unlimited. A single task larger than this is still run (in
  // row chunks) by the executor.
  virtual int64_t max_batch_staging_bytes() const = 0;

  // Runs every task of `batch` and writes their outputs. Returns one status
  // per task. Never throws; device errors become statuses and the executor
  // stays usable for later batches when the device allows it.
  virtual BatchResult Run(const Batch& batch, int slot) = 0;

  // Copies `bytes` of host memory into memory this executor's kernels read.
  // Blocking: call from a control thread, never from an RPC handler.
  virtual absl::StatusOr<DeviceBuffer> Upload(const void* host, std::size_t bytes) = 0;

  // False once the device hit an unrecoverable error (the executor's own
  // finding); the pool stops routing to it.
  virtual bool healthy() const = 0;

  // Takes the executor out of service until the process restarts: the
  // server found its device hung (a batch ran past --batch_timeout_s). From
  // then on it gets no tasks, no parameter uploads, and the batches already
  // queued for it are answered UNAVAILABLE without reaching the device.
  // Thread-safe; idempotent.
  void TakeOutOfService() { taken_out_of_service_->store(true, std::memory_order_release); }
  // Whether the executor may be given work: healthy and not taken out of
  // service. The one test every user of an executor applies.
  bool in_service() const { return healthy() && !taken_out_of_service(); }

 protected:
  bool taken_out_of_service() const {
    return taken_out_of_service_->load(std::memory_order_acquire);
  }
  // The same flag, for deleters of DeviceBuffers, which may outlive the
  // executor: memory on a hung device is not freed (freeing waits for the
  // device, which would hang the thread that drops the last reference).
  std::shared_ptr<const std::atomic<bool>> taken_out_of_service_flag() const {
    return taken_out_of_service_;
  }

 private:
  const std::shared_ptr<std::atomic<bool>> taken_out_of_service_ =
      std::make_shared<std::atomic<bool>>(false);
};

}  // namespace normsvc::server
