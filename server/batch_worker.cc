#include "server/batch_worker.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/log.h"
#include "server/thread_name.h"

namespace normsvc::server {
namespace {

// Every task of `batch` learns how the batch ran (Task::execution).
void StampExecution(Batch& batch, const BatchResult& result) {
  static std::atomic<uint64_t> next_id{1};
  BatchExecution execution;
  execution.id = next_id.fetch_add(1, std::memory_order_relaxed);
  execution.started_at = result.run_started_at;
  execution.finished_at = result.run_finished_at;
  execution.rows = batch.rows;
  execution.tasks = static_cast<int64_t>(batch.tasks.size());
  execution.h2d_seconds = result.h2d_seconds;
  execution.kernel_seconds = result.kernel_seconds;
  execution.d2h_seconds = result.d2h_seconds;
  execution.stages_untimed = result.stages_untimed;
  for (const std::unique_ptr<Task>& task : batch.tasks) task->execution = execution;
}

// Nanoseconds on the steady clock, never 0 (0 marks an idle slot).
int64_t SteadyNanos() {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  return std::max<int64_t>(now, 1);
}

}  // namespace

BatchResult ExecuteBatch(Executor& executor, const DeviceMetrics& metrics, const Batch& batch,
                         int slot) {
  if (!executor.in_service()) {
    // Taken out of service (a hung device) or failed: the batch never
    // reaches the device, and its requests learn so now, not at their
    // deadlines.
    BatchResult refused;
    refused.statuses.assign(batch.tasks.size(),
                            absl::UnavailableError(absl::StrCat(
                                executor.device().label,
                                " is out of service (an unrecoverable device error or a batch past "
                                "--batch_timeout_s; see the server log)")));
    refused.run_started_at = refused.run_finished_at = absl::Now();
    return refused;
  }
  metrics.batch_rows->Observe(static_cast<double>(batch.rows));
  metrics.batch_requests->Observe(static_cast<double>(batch.tasks.size()));
  metrics.batches_in_flight->Increment();
  const absl::Time started = absl::Now();
  BatchResult result = executor.Run(batch, slot);
  result.run_started_at = started;
  result.run_finished_at = absl::Now();
  metrics.batches_in_flight->Decrement();

  if (result.h2d_seconds) metrics.batch_h2d_seconds->Observe(*result.h2d_seconds);
  if (result.d2h_seconds) metrics.batch_d2h_seconds->Observe(*result.d2h_seconds);
  if (result.kernel_seconds) {
    metrics.batch_kernel_seconds->Observe(*result.kernel_seconds);
    if (*result.kernel_seconds > 0 && result.kernel_bytes > 0) {
      metrics.kernel_bandwidth->Observe(static_cast<double>(result.kernel_bytes) /
                                        *result.kernel_seconds);
    }
  }
  if (result.kernel_bytes > 0) {
    metrics.processed_bytes->Increment(static_cast<double>(result.kernel_bytes));
  }
  return result;
}

void FinishBatch(Batcher& batcher, const Executor& executor, Batch batch, BatchResult result,
                 ReplyPool* replies) {
  if (result.statuses.size() != batch.tasks.size()) {
    Log(LogLevel::kError, executor.device().label, ": executor returned ", result.statuses.size(),
        " statuses for ", batch.tasks.size(), " tasks");
    result.statuses.assign(batch.tasks.size(),
                           absl::InternalError("executor returned a malformed result"));
  }
  StampExecution(batch, result);
  if (replies != nullptr) {
    replies->FinishAll(batcher, std::move(batch.tasks), std::move(result.statuses));
    return;
  }
  for (size_t i = 0; i < batch.tasks.size(); ++i) {
    batcher.Finish(std::move(batch.tasks[i]), result.statuses[i]);
  }
}

void RunBatch(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics, Batch batch,
              int slot) {
  BatchResult result = ExecuteBatch(executor, metrics, batch, slot);
  batcher.BatchDone();
  FinishBatch(batcher, executor, std::move(batch), std::move(result));
}

BatchWorker::BatchWorker(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics,
                         ReplyPool* replies)
    : batcher_(batcher),
      executor_(executor),
      metrics_(metrics),
      replies_(replies),
      running_since_ns_(new std::atomic<int64_t>[executor.slots()]) {
  for (int slot = executor_.slots() - 1; slot >= 0; --slot) {
    free_slots_.push_back(slot);
    running_since_ns_[slot].store(0, std::memory_order_relaxed);
  }
}

absl::Duration BatchWorker::LongestRunningBatch() const {
  const int64_t now = SteadyNanos();
  int64_t longest = 0;
  for (int slot = 0; slot < executor_.slots(); ++slot) {
    const int64_t since = running_since_ns_[slot].load(std::memory_order_acquire);
    if (since != 0) longest = std::max(longest, now - since);
  }
  return absl::Nanoseconds(longest);
}

BatchWorker::~BatchWorker() { Join(); }

void BatchWorker::Start() {
  const int threads = 2 * executor_.slots();
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      NameCurrentThread("batch " + executor_.device().label);
      Loop();
    });
  }
}

void BatchWorker::Join() {
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

int BatchWorker::AcquireSlot() {
  absl::MutexLock lock(&mutex_);
  while (free_slots_.empty()) slot_freed_.Wait(&mutex_);
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void BatchWorker::ReleaseSlot(int slot) {
  absl::MutexLock lock(&mutex_);
  free_slots_.push_back(slot);
  slot_freed_.Signal();
}

void BatchWorker::Loop() {
  while (true) {
    const int slot = AcquireSlot();
    std::optional<Batch> batch = batcher_.WaitForBatch();
    if (!batch) {
      ReleaseSlot(slot);  // closed and empty: let the other threads see it too
      return;
    }
    running_since_ns_[slot].store(SteadyNanos(), std::memory_order_release);
    BatchResult result = ExecuteBatch(executor_, metrics_, *batch, slot);
    running_since_ns_[slot].store(0, std::memory_order_release);
    batcher_.BatchDone();
    ReleaseSlot(slot);
    FinishBatch(batcher_, executor_, *std::move(batch), std::move(result), replies_);
  }
}

}  // namespace normsvc::server
