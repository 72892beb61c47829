#include "server/batcher.h"

#include <algorithm>

#include "absl/base/macros.h"
#include "absl/strings/str_cat.h"
#include "server/spin_pause.h"

namespace normsvc::server {

Batcher::Batcher(BatcherOptions options, MemoryBudget* budget, const DeviceMetrics& metrics,
                 const RejectionMetrics& rejections, Clock clock)
    : options_(options),
      budget_(budget),
      metrics_(metrics),
      rejections_(rejections),
      clock_(std::move(clock)) {}

Batcher::~Batcher() {
  std::vector<std::unique_ptr<Task>> left;
  {
    absl::MutexLock lock(&mutex_);
    while (!queue_.empty()) left.push_back(PopLocked());
  }
  for (auto& task : left) Finish(std::move(task), absl::UnavailableError("server is stopping"));
}

absl::Status Batcher::Schedule(std::unique_ptr<Task>& task) {
  const absl::Time now = clock_();
  if (absl::Status st = CheckDeadline(task->deadline, now); !st.ok()) return st;
  absl::MutexLock lock(&mutex_);
  if (closed_) return refusal_;
  if (absl::Status st = CheckFitsBudget(task->memory_bytes()); !st.ok()) return st;
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue_size) {
    rejections_.queue_full->Increment();
    return absl::ResourceExhaustedError(absl::StrCat(
        "queue full: ", queue_.size(), " requests queued (--max_queue_size); retry later"));
  }
  if (!task->memory_prepaid) {
    if (absl::Status st = AcquireMemory(task->memory_bytes()); !st.ok()) return st;
  }
  task->enqueued_at = now;
  deadlines_.insert(task->deadline);
  queued_rows_ += task->rows;
  queued_bytes_ += task->input_bytes;
  queued_staging_ += task->staging_bytes;
  pending_requests_.fetch_add(1, std::memory_order_relaxed);
  pending_rows_.fetch_add(task->rows, std::memory_order_relaxed);
  metrics_.pending_requests->Increment();
  metrics_.pending_rows->Increment(static_cast<double>(task->rows));
  queue_.push_back(std::move(task));
  ready_.Signal();
  return absl::OkStatus();
}

absl::StatusOr<MemoryReservation> Batcher::ReserveMemory(int64_t bytes, absl::Time deadline) {
  if (absl::Status st = CheckDeadline(deadline, clock_()); !st.ok()) return st;
  if (absl::Status st = CheckFitsBudget(bytes); !st.ok()) return st;
  if (absl::Status st = AcquireMemory(bytes); !st.ok()) return st;
  return MemoryReservation::Adopt(budget_, bytes);
}

absl::Status Batcher::CheckDeadline(absl::Time deadline, absl::Time now) {
  if (deadline <= now) {
    rejections_.deadline_exceeded->Increment();
    return absl::DeadlineExceededError("the deadline passed before the request was queued");
  }
  return absl::OkStatus();
}

absl::Status Batcher::CheckFitsBudget(int64_t bytes) const {
  if (budget_ != nullptr && bytes > budget_->limit()) {
    // No amount of waiting makes room: refuse it as the limit it exceeds,
    // not as a retryable shortage.
    return absl::InvalidArgumentError(absl::StrCat(
        "the request needs ", bytes,
        " bytes of server memory (its input and output), more than --max_queued_bytes (",
        budget_->limit(), ") allows any request"));
  }
  return absl::OkStatus();
}

absl::Status Batcher::AcquireMemory(int64_t bytes) {
  if (budget_ != nullptr && !budget_->TryAcquire(bytes)) {
    rejections_.queue_full->Increment();
    return absl::ResourceExhaustedError(
        absl::StrCat("server memory budget spent: ", budget_->used(), " of ", budget_->limit(),
                     " bytes held by accepted requests and their replies not yet sent "
                     "(--max_queued_bytes); retry later"));
  }
  return absl::OkStatus();
}

std::unique_ptr<Task> Batcher::PopLocked() {
  std::unique_ptr<Task> task = std::move(queue_.front());
  queue_.pop_front();
  ForgetLocked(*task);
  return task;
}

void Batcher::ForgetLocked(const Task& task) {
  deadlines_.erase(deadlines_.find(task.deadline));
  queued_rows_ -= task.rows;
  queued_bytes_ -= task.input_bytes;
  queued_staging_ -= task.staging_bytes;
  pending_requests_.fetch_sub(1, std::memory_order_relaxed);
  pending_rows_.fetch_sub(task.rows, std::memory_order_relaxed);
  metrics_.pending_requests->Decrement();
  metrics_.pending_rows->Decrement(static_cast<double>(task.rows));
}

absl::Time Batcher::EarliestDeadlineLocked() const {
  return deadlines_.empty() ? absl::InfiniteFuture() : *deadlines_.begin();
}

bool Batcher::HeldForOverlapLocked() const {
  return running_batches_ > 0 && options_.overlap_min_bytes > 0 &&
         queued_bytes_ < options_.overlap_min_bytes && !closed_ && !flushing_;
}

bool Batcher::ReadyLocked(absl::Time now) const {
  if (queue_.empty() || HeldForOverlapLocked()) return false;
  const Task& head = *queue_.front();
  return closed_ || flushing_ || options_.max_queue_delay <= absl::ZeroDuration() ||
         head.kind == TaskKind::kBackward || head.enqueued_at + options_.max_queue_delay <= now ||
         queued_rows_ >= options_.max_batch_rows || queued_bytes_ >= options_.max_batch_bytes ||
         (options_.max_batch_staging_bytes > 0 &&
          queued_staging_ >= options_.max_batch_staging_bytes) ||
         static_cast<int64_t>(queue_.size()) >= options_.max_batch_tasks;
}

absl::Time Batcher::NextReadyTimeLocked() const {
  if (queue_.empty()) return absl::InfiniteFuture();
  // Deadlines count too: a request that expires while it waits for its
  // batch is answered when it expires, not when the batch closes.
  // Held: only BatchDone or a Schedule can make it ready, and both signal.
  if (HeldForOverlapLocked()) return EarliestDeadlineLocked();
  if (ReadyLocked(absl::InfinitePast())) return absl::InfinitePast();
  return std::min(queue_.front()->enqueued_at + options_.max_queue_delay, EarliestDeadlineLocked());
}

absl::Time Batcher::NextReadyTime() const {
  absl::MutexLock lock(&mutex_);
  return NextReadyTimeLocked();
}

void Batcher::PruneHeadLocked(absl::Time now, std::vector<Dropped>* dropped) {
  while (!queue_.empty()) {
    const Task& head = *queue_.front();
    // The deadline first: when it passes, gRPC also cancels the call, and
    // the caller is owed DEADLINE_EXCEEDED, not CANCELLED.
    if (head.deadline <= now) {
      rejections_.deadline_exceeded->Increment();
      dropped->push_back({PopLocked(), absl::DeadlineExceededError(
                                           "the deadline passed while the request was queued")});
    } else if (head.sink->IsCancelled()) {
      rejections_.cancelled->Increment();
      dropped->push_back({PopLocked(), absl::CancelledError("the caller cancelled the request")});
    } else {
      return;
    }
  }
}

void Batcher::PruneExpiredLocked(absl::Time now, std::vector<Dropped>* dropped) {
  if (now < EarliestDeadlineLocked()) return;
  // One pass: the tasks kept move up over those dropped, in order.
  auto kept = queue_.begin();
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if ((*it)->deadline <= now) {
      rejections_.deadline_exceeded->Increment();
      ForgetLocked(**it);
      dropped->push_back({std::move(*it), absl::DeadlineExceededError(
                                              "the deadline passed while the request was queued")});
    } else {
      if (kept != it) *kept = std::move(*it);
      ++kept;
    }
  }
  queue_.erase(kept, queue_.end());
}

std::optional<Batch> Batcher::TakeLocked(absl::Time now, std::vector<Dropped>* dropped) {
  // The head first: with one timeout for all, expired tasks are there, and
  // the whole queue is scanned only when one expired further back.
  PruneHeadLocked(now, dropped);
  PruneExpiredLocked(now, dropped);
  if (!ReadyLocked(now)) return std::nullopt;
  Batch batch;
  auto add = [&](std::unique_ptr<Task> task) {
    metrics_.queue_wait_seconds->Observe(absl::ToDoubleSeconds(now - task->enqueued_at));
    batch.rows += task->rows;
    batch.input_bytes += task->input_bytes;
    batch.output_bytes += task->output_bytes;
    batch.staging_bytes += task->staging_bytes;
    batch.tasks.push_back(std::move(task));
  };
  add(PopLocked());
  // A backward task runs alone; forward tasks join while the limits allow.
  while (!batch.is_backward()) {
    PruneHeadLocked(now, dropped);
    if (queue_.empty()) break;
    const Task& next = *queue_.front();
    if (next.kind == TaskKind::kBackward) break;
    if (static_cast<int64_t>(batch.tasks.size()) >= options_.max_batch_tasks) break;
    if (batch.rows + next.rows > options_.max_batch_rows) break;
    if (batch.input_bytes + next.input_bytes > options_.max_batch_bytes) break;
    if (options_.max_batch_staging_bytes > 0 &&
        batch.staging_bytes + next.staging_bytes > options_.max_batch_staging_bytes) {
      break;
    }
    add(PopLocked());
  }
  batch.closed_at = now;
  batch.more_queued = !queue_.empty();
  ++running_batches_;
  return batch;
}

void Batcher::FinishDropped(std::vector<Dropped>* dropped) {
  for (Dropped& d : *dropped) Finish(std::move(d.task), d.status);
  dropped->clear();
}

std::optional<Batch> Batcher::TryTakeBatch() {
  std::vector<Dropped> dropped;
  std::optional<Batch> batch;
  {
    absl::MutexLock lock(&mutex_);
    batch = TakeLocked(clock_(), &dropped);
  }
  FinishDropped(&dropped);
  return batch;
}

bool Batcher::SpinForWork() {
  if (options_.idle_spin <= absl::ZeroDuration()) return false;
  if (spinning_.exchange(true, std::memory_order_acquire)) return false;  // another worker spins
  const absl::Time until = absl::Now() + options_.idle_spin;
  bool arrived = false;
  while (!(arrived = pending_requests_.load(std::memory_order_relaxed) > 0) &&
         absl::Now() < until) {
    for (int i = 0; i < 64; ++i) SpinPause();
  }
  spinning_.store(false, std::memory_order_release);
  return arrived;
}

std::optional<Batch> Batcher::WaitForBatch() {
  std::vector<Dropped> dropped;
  bool spun = false;  // spin at most once before each sleep
  mutex_.Lock();
  while (true) {
    if (closed_ && queue_.empty()) break;
    std::optional<Batch> batch = TakeLocked(clock_(), &dropped);
    if (batch) {
      // What stayed queued may be ready too (the batch closed at a limit,
      // or took a backward task alone): the next waiter must not sleep
      // through it, since the Schedule that made it ready woke one only.
      if (ReadyLocked(clock_())) ready_.Signal();
      mutex_.Unlock();
      FinishDropped(&dropped);
      return batch;
    }
    if (!dropped.empty()) {
      // Answer dropped tasks without holding the lock, then look again.
      mutex_.Unlock();
      FinishDropped(&dropped);
      mutex_.Lock();
      continue;
    }
    const absl::Time wake = NextReadyTimeLocked();
    if (wake == absl::InfiniteFuture()) {
      if (!spun && !closed_ && queue_.empty()) {
        spun = true;
        mutex_.Unlock();
        SpinForWork();
        mutex_.Lock();
        continue;  // look again under the lock, whatever the spin saw
      }
      spun = false;
      ready_.Wait(&mutex_);
    } else {
      ready_.WaitWithDeadline(&mutex_, wake);
    }
  }
  mutex_.Unlock();
  return std::nullopt;
}

void Batcher::BatchDone() {
  absl::MutexLock lock(&mutex_);
  ABSL_ASSERT(running_batches_ > 0);
  --running_batches_;
  // A worker held back by overlap_min_bytes may take the queue now.
  if (!queue_.empty()) ready_.Signal();
}

void Batcher::Flush() {
  absl::MutexLock lock(&mutex_);
  flushing_ = true;
  ready_.SignalAll();
}

void Batcher::Close(absl::Status refusal) {
  absl::MutexLock lock(&mutex_);
  // An OK refusal would read as "scheduled" while the task stays the caller's.
  if (!closed_) refusal_ = refusal.ok() ? absl::UnavailableError("closed") : std::move(refusal);
  closed_ = true;
  ready_.SignalAll();
}

bool Batcher::closed() const {
  absl::MutexLock lock(&mutex_);
  return closed_;
}

void Batcher::FailQueued(const absl::Status& status) {
  std::vector<Dropped> dropped;
  {
    absl::MutexLock lock(&mutex_);
    while (!queue_.empty()) dropped.push_back({PopLocked(), status});
  }
  FinishDropped(&dropped);
}

void Batcher::Finish(std::unique_ptr<Task> task, const absl::Status& status) {
  MemoryReservation reservation = MemoryReservation::Adopt(budget_, task->memory_bytes());
  TaskSink* sink = task->sink;
  if (task->execution) sink->OnTaskExecuted(*task->execution);
  // The task (and any parameter set it holds) goes first: after OnTaskDone
  // the request memory its views point into may be gone.
  task.reset();
  sink->HoldUntilReplied(std::move(reservation));
  sink->OnTaskDone(status);
}

}  // namespace normsvc::server
