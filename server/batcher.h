// The dynamic batcher of one executor: a bounded FIFO of tasks that closes
// batches for the executor's workers.
//
// Contract:
// - Schedule(task) never blocks. On OK the batcher owns the task and
//   guarantees it is finished exactly once (Finish). On error the caller
//   keeps it: RESOURCE_EXHAUSTED when the queue holds max_queue_size tasks
//   or the server's byte budget is spent, INVALID_ARGUMENT when the task
//   alone needs more than the whole budget, DEADLINE_EXCEEDED when its
//   deadline has already passed, UNAVAILABLE once closed. A task whose
//   memory was reserved beforehand (ReserveMemory, Task::memory_prepaid) is
//   not charged again.
// - A batch closes when it reaches max_batch_rows, max_batch_bytes (input
//   bytes), the executor's staging capacity or max_batch_tasks, or when its
//   oldest task has waited max_queue_delay (0: whenever a worker asks).
//   Tasks leave in FIFO order; a closed batch never reopens.
// - While a batch taken from this batcher is running (taken and not yet
//   reported by BatchDone), the next one closes only once the queue holds
//   overlap_min_bytes input bytes (0: no such wait): a second batch in
//   flight pays for its own launch and copies, which only a large one
//   hides behind the running batch; a small one waits for the executor to
//   be free and leaves with what queued meanwhile. Not while flushing or
//   closed. Every batch taken (TryTakeBatch, WaitForBatch) must be reported
//   by BatchDone once it has run.
// - A task larger than the limits forms a batch of its own; it is never
//   refused for its size here (edge validation bounds request sizes).
// - A backward task always forms a batch of its own (one launch each).
// - Tasks whose caller cancelled, or whose deadline passed while queued,
//   leave before launch: finished with CANCELLED or DEADLINE_EXCEEDED.
//
// The batching logic (Schedule, TryTakeBatch) is thread-free and reads the
// time from an injectable clock, so tests drive it deterministically.
// WaitForBatch is the blocking form the executor's worker threads use.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/task.h"

namespace normsvc::server {

struct BatcherOptions {
  int64_t max_batch_rows = 8192;
  int64_t max_batch_bytes = int64_t{64} << 20;
  int64_t max_batch_staging_bytes = 0;  // 0: unlimited
  int64_t max_batch_tasks = 4096;
  absl::Duration max_queue_delay = absl::ZeroDuration();
  int64_t max_queue_size = 4096;
  // How long one idle worker polls for a new request before it sleeps on
  // the condition variable. A request that arrives within it is taken
  // without a futex wake-up (tens of microseconds on a busy host), at the
  // cost of one core while requests keep arriving. 0: sleep at once.
  absl::Duration idle_spin = absl::ZeroDuration();
  // See the contract above; 0: a free slot takes the next batch at once.
  int64_t overlap_min_bytes = 0;
};

class Batcher {
 public:
  using Clock = std::function<absl::Time()>;

  // `budget` is shared by the server's batchers; `metrics` must outlive this.
  Batcher(
      BatcherOptions options, MemoryBudget* budget, const DeviceMetrics& metrics,
      const RejectionMetrics& rejections, Clock clock = [] { return absl::Now(); });
  // Finishes any task still queued with UNAVAILABLE.
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // See the contract above. On OK `task` is left null.
  absl::Status Schedule(std::unique_ptr<Task>& task);
  // Acquires `bytes` of the server's memory budget for a task about to be
  // built (its memory_bytes()) whose deadline is `deadline`, with Schedule's
  // answers for such a task, in its order: DEADLINE_EXCEEDED once the
  // deadline has passed, INVALID_ARGUMENT past the whole budget,
  // RESOURCE_EXHAUSTED when it is spent (each counted as Schedule counts
  // it). An empty reservation when the server has no budget.
  absl::StatusOr<MemoryReservation> ReserveMemory(int64_t bytes, absl::Time deadline);

  // The next batch if one is ready at clock() (it drops cancelled and
  // expired tasks from the head first); nullopt otherwise.
  std::optional<Batch> TryTakeBatch();
  // When the head batch becomes ready if nothing else arrives, or the
  // earliest deadline of a queued task if that comes first (the worker
  // answers it then); when the queue is empty or held (overlap_min_bytes:
  // only BatchDone or more requests release it), the earliest deadline, or
  // InfiniteFuture when there is none.
  absl::Time NextReadyTime() const;

  // Blocks until a batch is ready and returns it; nullopt once closed and
  // empty. For worker threads; uses the real clock for waiting.
  std::optional<Batch> WaitForBatch();

  // A batch this batcher handed out has finished running (its outputs are
  // written; its tasks may still be unanswered). Every batch taken must be
  // reported once, for overlap_min_bytes.
  void BatchDone() ABSL_LOCKS_EXCLUDED(mutex_);

  // From now on batches close without waiting for max_queue_delay (the
  // drain); new tasks are still accepted.
  void Flush();
  // Refuses new tasks with `refusal` (UNAVAILABLE; the first Close's
  // stands); queued tasks still come out as batches, without waiting for
  // max_queue_delay. Wakes all waiting workers.
  void Close(absl::Status refusal = absl::UnavailableError("server is shutting down"));
  bool closed() const ABSL_LOCKS_EXCLUDED(mutex_);

  // Finishes every queued task with `status` now (its executor was taken
  // out of service); batches already taken are not affected.
  void FailQueued(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mutex_);

  // Reports how the task's batch ran (when it ran), hands its share of the
  // byte budget to its sink (TaskSink::HoldUntilReplied), deletes it and
  // reports `status` to the sink.
  void Finish(std::unique_ptr<Task> task, const absl::Status& status);

  // For routing and tests; read without the lock.
  int64_t pending_requests() const { return pending_requests_.load(std::memory_order_relaxed); }
  int64_t pending_rows() const { return pending_rows_.load(std::memory_order_relaxed); }
  const BatcherOptions& options() const { return options_; }

 private:
  // Schedule's and ReserveMemory's answers: a deadline passed (counted); a
  // task of `bytes` past the whole budget; the budget spent (counted;
  // nothing acquired then). OK otherwise.
  absl::Status CheckDeadline(absl::Time deadline, absl::Time now);
  absl::Status CheckFitsBudget(int64_t bytes) const;
  absl::Status AcquireMemory(int64_t bytes);
  struct Dropped {
    std::unique_ptr<Task> task;
    absl::Status status;
  };
  bool ReadyLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A batch is running and the queue is too small to start another beside
  // it (overlap_min_bytes): it waits for BatchDone or more requests.
  bool HeldForOverlapLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Time NextReadyTimeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::unique_ptr<Task> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes a task leaving the queue out of its counts and deadlines_.
  void ForgetLocked(const Task& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Time EarliestDeadlineLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Drops cancelled/expired tasks at the head into `dropped`.
  void PruneHeadLocked(absl::Time now, std::vector<Dropped>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Once `now` reaches the earliest deadline: drops every expired task,
  // wherever it is queued, into `dropped`.
  void PruneExpiredLocked(absl::Time now, std::vector<Dropped>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::optional<Batch> TakeLocked(absl::Time now, std::vector<Dropped>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void FinishDropped(std::vector<Dropped>* dropped);
  // Polls for a queued request for up to options_.idle_spin, if no other
  // worker is polling; true when one arrived. Called without the lock.
  bool SpinForWork();

  const BatcherOptions options_;
  MemoryBudget* const budget_;
  const DeviceMetrics& metrics_;
  const RejectionMetrics& rejections_;
  const Clock clock_;

  mutable absl::Mutex mutex_;
  absl::CondVar ready_;
  std::deque<std::unique_ptr<Task>> queue_ ABSL_GUARDED_BY(mutex_);
  int64_t queued_rows_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t queued_staging_ ABSL_GUARDED_BY(mutex_) = 0;
  bool flushing_ ABSL_GUARDED_BY(mutex_) = false;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Status refusal_ ABSL_GUARDED_BY(mutex_);         // Schedule's answer once closed_
  int64_t running_batches_ ABSL_GUARDED_BY(mutex_) = 0;  // taken, BatchDone not yet called
  // The deadlines of the queued tasks: workers wake at the earliest to
  // answer a request that expires while it waits, wherever it is queued.
  std::multiset<absl::Time> deadlines_ ABSL_GUARDED_BY(mutex_);
  std::atomic<int64_t> pending_requests_{0};
  std::atomic<int64_t> pending_rows_{0};
  // At most one waiting worker spins (BatcherOptions::idle_spin).
  std::atomic<bool> spinning_{false};
};

}  // namespace normsvc::server
