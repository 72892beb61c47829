#include "server/control_queue.h"

namespace normsvc::server {

ControlQueue::ControlQueue(size_t max_jobs) : max_jobs_(max_jobs), thread_([this] { Loop(); }) {}

ControlQueue::~ControlQueue() { Stop(); }

bool ControlQueue::Post(std::function<void()> job) {
  absl::MutexLock lock(&mutex_);
  if (stopping_ || jobs_.size() >= max_jobs_) return false;
  jobs_.push_back(std::move(job));
  wake_.Signal();
  return true;
}

void ControlQueue::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    wake_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

void ControlQueue::Loop() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mutex_);
      while (!stopping_ && jobs_.empty()) wake_.Wait(&mutex_);
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace normsvc::server
