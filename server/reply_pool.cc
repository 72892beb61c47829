#include "server/reply_pool.h"

#include "server/thread_name.h"

namespace normsvc::server {

ReplyPool::ReplyPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      NameCurrentThread("reply");
      Loop();
    });
  }
}

ReplyPool::~ReplyPool() { Stop(); }

void ReplyPool::FinishAll(Batcher& batcher, std::vector<std::unique_ptr<Task>> tasks,
                          std::vector<absl::Status> statuses) {
  if (tasks.empty()) return;
  if (tasks.size() > 1 && !threads_.empty()) {
    absl::MutexLock lock(&mutex_);
    for (size_t i = 1; i < tasks.size(); ++i) {
      queue_.push_back({&batcher, std::move(tasks[i]), std::move(statuses[i])});
      work_.Signal();
    }
  }
  batcher.Finish(std::move(tasks[0]), statuses[0]);
  for (size_t i = 1; i < tasks.size(); ++i) {  // only without pool threads
    if (tasks[i] != nullptr) batcher.Finish(std::move(tasks[i]), statuses[i]);
  }
  // Help with whatever is still queued.
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mutex_);
      if (!PopLocked(&item)) return;
    }
    item.batcher->Finish(std::move(item.task), item.status);
  }
}

bool ReplyPool::PopLocked(Item* item) {
  if (queue_.empty()) return false;
  *item = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void ReplyPool::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    work_.SignalAll();
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void ReplyPool::Loop() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mutex_);
      while (queue_.empty() && !stopping_) work_.Wait(&mutex_);
      if (!PopLocked(&item)) return;  // stopping and drained
    }
    item.batcher->Finish(std::move(item.task), item.status);
  }
}

}  // namespace normsvc::server
