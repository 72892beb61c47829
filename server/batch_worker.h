// Drives one executor. Its device has executor.slots() batch slots (the
// batches in flight); the worker runs two threads per slot. A thread takes a
// free slot, then the next closed batch (so with max_queue_delay 0 a batch
// launches as soon as a slot frees up, holding whatever queued meanwhile,
// unless the batcher holds it back while another batch runs:
// overlap_min_bytes), runs it on the slot, tells the batcher it ran
// (Batcher::BatchDone), gives the slot back, and only then finishes the
// batch's tasks (sends the replies, with the ReplyPool's help): the next
// batch is already on the device while the previous one's replies go out.
// These are the only threads that call Executor::Run; RPC handlers never
// wait on them.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batcher.h"
#include "server/executor.h"
#include "server/metrics.h"
#include "server/reply_pool.h"

namespace normsvc::server {

// Runs `batch` on `slot` and records the batch metrics; the outputs are
// written when it returns.
BatchResult ExecuteBatch(Executor& executor, const DeviceMetrics& metrics, const Batch& batch,
                         int slot);
// Finishes every task of `batch` with its status from `result`, in
// parallel through `replies` when given. Each task's sink first learns how
// the batch ran (TaskSink::OnTaskExecuted: the Run interval ExecuteBatch
// stamped, the stage timings).
void FinishBatch(Batcher& batcher, const Executor& executor, Batch batch, BatchResult result,
                 ReplyPool* replies = nullptr);
// Both, in order, with Batcher::BatchDone between: what the worker threads
// do, and what tests call directly with a fake executor.
void RunBatch(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics, Batch batch,
              int slot);

class BatchWorker {
 public:
  // `replies` (shared by the server's workers) may be null.
  BatchWorker(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics,
              ReplyPool* replies);
  ~BatchWorker();  // Join()

  void Start();
  // Returns once the batcher is closed and empty and every thread is idle.
  void Join();

  // How long the oldest batch now running has run (zero when none runs):
  // what the pool's stuck-batch watch reads.
  absl::Duration LongestRunningBatch() const;

 private:
  int AcquireSlot();
  void ReleaseSlot(int slot);
  void Loop();

  Batcher& batcher_;
  Executor& executor_;
  const DeviceMetrics& metrics_;
  ReplyPool* const replies_;
  absl::Mutex mutex_;
  absl::CondVar slot_freed_;
  std::vector<int> free_slots_ ABSL_GUARDED_BY(mutex_);
  // Per slot: when its running batch started (steady clock, ns since its
  // epoch), 0 while the slot is idle.
  std::unique_ptr<std::atomic<int64_t>[]> running_since_ns_;
  std::vector<std::thread> threads_;
};

}  // namespace normsvc::server
