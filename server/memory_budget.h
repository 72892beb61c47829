// A byte budget shared by all batchers of a server (--max_queued_bytes):
// request and response bytes of every accepted, unanswered task. Lock-free.
#pragma once

#include <atomic>
#include <cstdint>

namespace normsvc::server {

class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t limit) : limit_(limit) {}

  // Reserves `bytes` if they fit; false (and nothing reserved) otherwise.
  bool TryAcquire(int64_t bytes) {
    int64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ - used) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  void Release(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace normsvc::server
