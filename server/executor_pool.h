// The server's executors (one per GPU, or the CPU one), each with its
// batcher and worker threads, and the routing of tasks among them.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batch_worker.h"
#include "server/batcher.h"
#include "server/executor.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/reply_pool.h"

namespace normsvc::server {

class ExecutorPool {
 public:
  // Executor i uses metrics.device(i). `batching` is the per-executor
  // template; each batcher also honours its executor's staging capacity.
  // `reply_threads` send a batch's replies beside the thread that ran it
  // (negative: a quarter of the CPUs the process may use, UsableCpus, 2 to 8;
  // 0: that thread sends all).
  ExecutorPool(std::vector<std::unique_ptr<Executor>> executors, const BatcherOptions& batching,
               MemoryBudget* budget, ServiceMetrics& metrics, int reply_threads = -1);
  ~ExecutorPool();  // Close() and Join()

  // Called once, on a scheduling thread or the stuck-batch watch's, the
  // first time no executor is usable (each has failed with an unrecoverable
  // CUDA error or a stuck batch; every request is refused UNAVAILABLE from
  // then on): the server turns its health to NOT_SERVING so that load
  // balancers and probes stop sending to it. Set before Start().
  void SetNoHealthyExecutorCallback(std::function<void()> callback) {
    on_no_healthy_executor_ = std::move(callback);
  }

  void Start();
  // Watches the batches running on every executor: a batch that runs longer
  // than `timeout` (a kernel or a copy that never ends: a hung device never
  // gives its slot back) takes its executor out of service until restart,
  // with an error in the log: its batcher refuses new tasks and answers the
  // queued ones UNAVAILABLE at once (they would wait for the device until
  // their deadlines). Call once, after Start(); Close() stops it.
  void WatchForStuckBatches(absl::Duration timeout);
  // Hands `task` to the usable executor with the fewest pending rows (ties
  // rotate). Same ownership contract as Batcher::Schedule.
  absl::Status Schedule(std::unique_ptr<Task>& task);
  // Reserves the memory of a task about to be built (Batcher::ReserveMemory:
  // the budget is shared, so the first usable executor's batcher answers),
  // so that a request's copies and reply are allocated only once the budget
  // has room for them; the task then goes to Schedule with memory_prepaid.
  // UNAVAILABLE when no executor is usable.
  absl::StatusOr<MemoryReservation> ReserveMemory(int64_t bytes, absl::Time deadline);
  // Schedule for a task whose memory `prepaid` holds (ReserveMemory, sized
  // as its memory_bytes()): on OK the batcher accounts for the bytes; on an
  // error they are given back before this returns. A reservation of another
  // size is given back and the task charged as Schedule charges any.
  absl::Status Schedule(std::unique_ptr<Task>& task, MemoryReservation prepaid);
  // Launch queued work without waiting for max_queue_delay (the drain).
  void Flush();
  // Stop accepting; queued tasks still run. Then Join waits for them.
  void Close();
  void Join();

  int size() const { return static_cast<int>(executors_.size()); }
  Executor& executor(int i) { return *executors_[i]; }
  Batcher& batcher(int i) { return *batchers_[i]; }
  // False once executor i failed (Executor::healthy) or had a stuck batch
  // (Executor::TakeOutOfService).
  bool usable(int i) const { return executors_[i]->in_service(); }
  std::vector<Executor*> executor_pointers() const;

 private:
  // The executor Schedule gives a task to; -1 when none is usable.
  int Route();
  void WatchLoop(absl::Duration timeout);
  void ReportIfNoneUsable();

  std::vector<std::unique_ptr<Executor>> executors_;
  ReplyPool replies_;  // before the workers: they use it until joined
  std::vector<std::unique_ptr<Batcher>> batchers_;
  std::vector<std::unique_ptr<BatchWorker>> workers_;
  std::atomic<uint32_t> rotation_{0};
  std::function<void()> on_no_healthy_executor_;
  std::atomic<bool> reported_no_healthy_executor_{false};
  absl::Mutex watch_mutex_;
  absl::CondVar watch_wake_;
  bool watch_stopping_ ABSL_GUARDED_BY(watch_mutex_) = false;
  std::thread watcher_;
};

}  // namespace normsvc::server
