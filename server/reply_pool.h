// Sends replies in parallel. Finishing a task runs the RPC's completion
// (gRPC's Finish: serialize, hand to the transport), tens of microseconds
// each; done one after another by the thread that ran the batch, the last
// request of a batch would wait for all the others. The batch's thread
// finishes the first task itself, so a batch of one never changes threads,
// hands the rest to the pool's idle threads and helps until the queue is
// empty.
#pragma once

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/batcher.h"
#include "server/task.h"

namespace normsvc::server {

class ReplyPool {
 public:
  explicit ReplyPool(int threads);
  ~ReplyPool();  // Stop()
  ReplyPool(const ReplyPool&) = delete;
  ReplyPool& operator=(const ReplyPool&) = delete;

  // Finishes every task of `batch` (statuses[i] for tasks[i]) through
  // `batcher`, using the calling thread and the pool's threads. Returns once
  // the queue is empty (tasks taken by pool threads may still be finishing).
  void FinishAll(Batcher& batcher, std::vector<std::unique_ptr<Task>> tasks,
                 std::vector<absl::Status> statuses);
  // Finishes what is queued, then joins the threads. Idempotent.
  void Stop();

 private:
  struct Item {
    Batcher* batcher;
    std::unique_ptr<Task> task;
    absl::Status status;
  };
  bool PopLocked(Item* item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Loop();

  absl::Mutex mutex_;
  absl::CondVar work_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace normsvc::server
