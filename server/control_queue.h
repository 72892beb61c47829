// One thread for the blocking control-plane work RPC handlers must not do
// themselves: uploading and freeing registered parameters. Jobs run in
// order; the queue is bounded.
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace normsvc::server {

class ControlQueue {
 public:
  explicit ControlQueue(size_t max_jobs = 256);
  ~ControlQueue();  // Stop()

  // False (job not taken) when full or stopped.
  bool Post(std::function<void()> job);
  // Runs the jobs already posted, then joins the thread. Idempotent.
  void Stop();

 private:
  void Loop();

  const size_t max_jobs_;
  absl::Mutex mutex_;
  absl::CondVar wake_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace normsvc::server
