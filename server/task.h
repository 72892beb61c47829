// The domain Task: one request (or one request of a stream) on its way
// through the batcher to an executor, and the Batch the batcher forms.
//
// A Task holds views, not copies: its input pointers point into the request
// bytes gRPC parsed (or, for the unary Normalize call, into the buffers gRPC
// received: ReceivedInputs), its output pointers into the response's memory,
// sized before scheduling. Both stay valid until the sink's OnTaskDone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "normsvc/kernels/types.h"
#include "server/memory_budget.h"
#include "server/received_bytes.h"

namespace normsvc::server {

class ParameterSet;

// How the batch that carried a task ran: stamped by the batch worker around
// Executor::Run, copied into each of the batch's tasks, and shown to the
// task's sink just before OnTaskDone. Statistics that split a request's time
// into queue and compute (KServe's ModelStatistics) read it.
struct BatchExecution {
  uint64_t id = 0;         // one per batch run, unique in the process
  absl::Time started_at;   // Executor::Run called
  absl::Time finished_at;  // Executor::Run returned
  int64_t rows = 0;        // rows of the whole batch
  int64_t tasks = 0;       // tasks of the whole batch
  // The executor's stage timings (BatchResult), absent where a stage does
  // not exist or, with stages_untimed, where this batch was not timed.
  std::optional<double> h2d_seconds;
  std::optional<double> kernel_seconds;
  std::optional<double> d2h_seconds;
  bool stages_untimed = false;
};

// Implemented by the RPC layer: where a task's outcome goes.
class TaskSink {
 public:
  // May be called from any thread, any number of times.
  virtual bool IsCancelled() const = 0;
  // Called exactly once per task, from any thread, after the outputs are
  // written (or not, on error). Once it returns the caller touches neither
  // the sink nor the request and response memory again.
  virtual void OnTaskDone(const absl::Status& status) = 0;
  // Called at most once per task, just before OnTaskDone and on the same
  // thread, when the task ran in a batch (whatever its status). Sinks that
  // keep no per-stage statistics ignore it.
  virtual void OnTaskExecuted(const BatchExecution& /*execution*/) {}
  // Called once per task that was accepted (Batcher::Schedule returned OK),
  // just before OnTaskDone and on the same thread, with the task's share of
  // --max_queued_bytes (its request and response bytes). A sink whose
  // request or reply memory outlives OnTaskDone (a reply not yet sent to a
  // slow client) keeps `reservation`, or the part of it that is still in
  // memory, until that memory is gone, so that the budget bounds replies
  // waiting for their client too. By default it is given back at once.
  virtual void HoldUntilReplied(MemoryReservation /*reservation*/) {}

 protected:
  ~TaskSink() = default;
};

enum class TaskKind : uint8_t { kForward, kBackward };

// Forward inputs left in gRPC's receive buffers (the unary Normalize call
// parses without copying its tensors). Where one is set, the matching
// pointer in Task::forward marks the tensor present and points at its first
// byte, but the bytes may continue in other pieces, or be misaligned for the
// kernels: executors read them through these (ReceivedBytes::CopyTo) into
// memory of their own.
struct ReceivedInputs {
  const ReceivedBytes* x = nullptr;
  const ReceivedBytes* residual = nullptr;
  const ReceivedBytes* gamma = nullptr;  // inline gamma
  const ReceivedBytes* beta = nullptr;   // inline beta

  bool any() const {
    return x != nullptr || residual != nullptr || gamma != nullptr || beta != nullptr;
  }
};

struct Task {
  TaskKind kind = TaskKind::kForward;
  // Host views. Forward: x, residual, inline gamma/beta in; out,
  // residual_out, mean, rstd out. Backward: x, dy, inline gamma, mean, rstd
  // in; dx, dgamma, dbeta out. All row strides equal the hidden size.
  kernels::ForwardSegment forward;
  ReceivedInputs received;  // forward only
  kernels::BackwardArgs backward;
  // A registered set; when present it supplies gamma/beta (and the views'
  // gamma/beta are null). Held here so a concurrent Delete or replace cannot
  // free it while the task is queued or running.
  std::shared_ptr<const ParameterSet> parameters;

  int64_t rows = 0;
  int64_t hidden = 0;
  int64_t input_bytes = 0;    // bytes read from the request
  int64_t output_bytes = 0;   // bytes written into the response
  int64_t staging_bytes = 0;  // footprint in an executor's staging buffer (staging_layout.h)

  absl::Time deadline = absl::InfiniteFuture();
  absl::Time enqueued_at;
  TaskSink* sink = nullptr;
  // Set by the batch worker once the task's batch has run (FinishBatch).
  std::optional<BatchExecution> execution;

  // Memory the task pins while accepted: counted against max_queued_bytes.
  int64_t memory_bytes() const { return input_bytes + output_bytes; }
  // memory_bytes() was acquired from the budget before the task was built
  // (ExecutorPool::ReserveMemory: the call reserves before it copies the
  // request's tensors and allocates the reply), and goes to the batcher with
  // the task: Schedule does not acquire it again; on an error it stays the
  // caller's to release.
  bool memory_prepaid = false;
};

// Tasks that run as one launch (forward) or alone (backward, or one task
// larger than the batch limits). Closed once; never reopened.
struct Batch {
  std::vector<std::unique_ptr<Task>> tasks;
  int64_t rows = 0;
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;
  int64_t staging_bytes = 0;
  absl::Time closed_at;
  // Requests were still queued when the batch closed: the executor is busy,
  // so CPU time spent waiting on the device is taken from other work.
  bool more_queued = false;

  bool is_backward() const { return !tasks.empty() && tasks.front()->kind == TaskKind::kBackward; }
};

}  // namespace normsvc::server
