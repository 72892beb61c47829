#include "server/executor_pool.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

#include "server/log.h"
#include "server/thread_name.h"
#include "server/usable_cpus.h"

namespace normsvc::server {
namespace {

// Threads that send replies alongside the batch workers: a quarter of the
// CPUs the process may use, between 2 and 8.
int ReplyThreads(int requested) {
  if (requested >= 0) return requested;
  return std::clamp(UsableCpus() / 4, 2, 8);
}

absl::Status NoHealthyExecutor() {
  return absl::UnavailableError(
      "no healthy executor: every device failed with an unrecoverable error or a stuck batch "
      "(see the server log); the server now reports NOT_SERVING");
}

}  // namespace

ExecutorPool::ExecutorPool(std::vector<std::unique_ptr<Executor>> executors,
                           const BatcherOptions& batching, MemoryBudget* budget,
                           ServiceMetrics& metrics, int reply_threads)
    : executors_(std::move(executors)), replies_(ReplyThreads(reply_threads)) {
  for (int i = 0; i < size(); ++i) {
    BatcherOptions options = batching;
    options.max_batch_staging_bytes = executors_[i]->max_batch_staging_bytes();
    batchers_.push_back(
        std::make_unique<Batcher>(options, budget, metrics.device(i), metrics.rejections()));
    workers_.push_back(
        std::make_unique<BatchWorker>(*batchers_[i], *executors_[i], metrics.device(i), &replies_));
  }
}

ExecutorPool::~ExecutorPool() {
  Close();
  Join();
}

void ExecutorPool::Start() {
  for (auto& worker : workers_) worker->Start();
}

absl::StatusOr<MemoryReservation> ExecutorPool::ReserveMemory(int64_t bytes, absl::Time deadline) {
  // The budget is the server's, not an executor's: any usable executor's
  // batcher answers (and counts a refusal). Not Route(): that advances the
  // tie-break rotation, and the Schedule that follows routes the task.
  for (int i = 0; i < size(); ++i) {
    if (usable(i)) return batchers_[i]->ReserveMemory(bytes, deadline);
  }
  ReportIfNoneUsable();
  return NoHealthyExecutor();
}

absl::Status ExecutorPool::Schedule(std::unique_ptr<Task>& task, MemoryReservation prepaid) {
  task->memory_prepaid = prepaid.bytes() > 0 && prepaid.bytes() == task->memory_bytes();
  if (!task->memory_prepaid) prepaid.ShrinkTo(0);
  absl::Status status = Schedule(task);
  if (status.ok()) prepaid.Detach();  // the batcher adopts the bytes with the task
  return status;                      // else `prepaid` gives them back here
}

absl::Status ExecutorPool::Schedule(std::unique_ptr<Task>& task) {
  // A batcher that the stuck-batch watch closed after this routing chose
  // it (its executor just left service) refuses; the task is routed once
  // more, among the executors still in service. A batcher closed by the
  // server's stop refuses again, and that answer stands.
  for (int attempt = 0;; ++attempt) {
    const int chosen = Route();
    if (chosen < 0) {
      ReportIfNoneUsable();
      return NoHealthyExecutor();
    }
    absl::Status status = batchers_[chosen]->Schedule(task);
    if (status.code() != absl::StatusCode::kUnavailable || attempt > 0 || usable(chosen) ||
        !batchers_[chosen]->closed()) {
      return status;
    }
  }
}

int ExecutorPool::Route() {
  // The healthy executor with the fewest queued rows among those whose
  // queue has room (--max_queue_size counts requests, so the fewest rows can
  // sit in a full queue of small requests); a full one only when every
  // healthy queue is full, which then refuses RESOURCE_EXHAUSTED. Ties go
  // round the executors. -1 when none is usable.
  const int n = size();
  const uint32_t start = rotation_.fetch_add(1, std::memory_order_relaxed);
  int best = -1;
  bool best_has_room = false;
  int64_t best_rows = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < n; ++k) {
    const int i = static_cast<int>((start + k) % n);
    if (!usable(i)) continue;
    const Batcher& batcher = *batchers_[i];
    const bool has_room = batcher.pending_requests() < batcher.options().max_queue_size;
    const int64_t rows = batcher.pending_rows();
    if (best < 0 || (has_room && !best_has_room) ||
        (has_room == best_has_room && rows < best_rows)) {
      best = i;
      best_has_room = has_room;
      best_rows = rows;
    }
  }
  return best;
}

void ExecutorPool::ReportIfNoneUsable() {
  for (int i = 0; i < size(); ++i) {
    if (usable(i)) return;
  }
  if (!reported_no_healthy_executor_.exchange(true) && on_no_healthy_executor_) {
    on_no_healthy_executor_();
  }
}

void ExecutorPool::WatchForStuckBatches(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || watcher_.joinable()) return;
  watcher_ = std::thread([this, timeout] {
    NameCurrentThread("stuck_watch");
    WatchLoop(timeout);
  });
}

void ExecutorPool::WatchLoop(absl::Duration timeout) {
  // A quarter of the timeout between looks, so a stuck batch is noticed
  // within 1.25 timeouts; at most a second, at least 10 ms.
  const absl::Duration interval = std::clamp(timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
  absl::MutexLock lock(&watch_mutex_);
  while (!watch_stopping_) {
    // A CondVar rather than Mutex::AwaitWithTimeout: the ThreadSanitizer
    // build annotates absl's Lock, Unlock and CondVar waits only.
    watch_wake_.WaitWithTimeout(&watch_mutex_, interval);
    if (watch_stopping_) break;
    for (int i = 0; i < size(); ++i) {
      if (!usable(i)) continue;
      const absl::Duration running = workers_[i]->LongestRunningBatch();
      if (running <= timeout) continue;
      const std::string& label = executors_[i]->device().label;
      // Routing passes it over from here; a task routed to it just before
      // meets the closed batcher and is routed again (Schedule); those
      // already queued are answered now, not at their deadlines.
      executors_[i]->TakeOutOfService();
      Log(LogLevel::kError, label, ": a batch has run for ", absl::FormatDuration(running),
          ", past --batch_timeout_s (", absl::FormatDuration(timeout),
          "): the device looks hung; no more batches are routed to it until restart");
      batchers_[i]->Close(absl::UnavailableError(
          absl::StrCat(label, " is out of service: a batch on it ran past --batch_timeout_s")));
      batchers_[i]->FailQueued(absl::UnavailableError(
          absl::StrCat(label,
                       " was taken out of service while the request was queued: a batch "
                       "on it ran past --batch_timeout_s (the device looks hung)")));
      ReportIfNoneUsable();
    }
  }
}

void ExecutorPool::Flush() {
  for (auto& batcher : batchers_) batcher->Flush();
}

void ExecutorPool::Close() {
  for (auto& batcher : batchers_) batcher->Close();
  {
    absl::MutexLock lock(&watch_mutex_);
    watch_stopping_ = true;
    watch_wake_.Signal();
  }
  if (watcher_.joinable()) watcher_.join();
}

void ExecutorPool::Join() {
  for (auto& worker : workers_) worker->Join();
  replies_.Stop();
}

std::vector<Executor*> ExecutorPool::executor_pointers() const {
  std::vector<Executor*> pointers;
  for (const auto& executor : executors_) pointers.push_back(executor.get());
  return pointers;
}

}  // namespace normsvc::server
