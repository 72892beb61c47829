// A byte budget shared by all batchers of a server (--max_queued_bytes):
// request and response bytes of every accepted task until its reply has
// been handed to the client (TaskSink::HoldUntilReplied). Lock-free.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

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

// Bytes already acquired from a budget, released when this is destroyed (or
// shrunk). Move-only; an empty one (no budget) releases nothing.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  // Takes over `bytes` that the caller acquired from `budget`.
  static MemoryReservation Adopt(MemoryBudget* budget, int64_t bytes) {
    MemoryReservation reservation;
    reservation.budget_ = budget;
    reservation.bytes_ = budget != nullptr ? bytes : 0;
    return reservation;
  }
  MemoryReservation(MemoryReservation&& other) noexcept
      : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  MemoryReservation& operator=(MemoryReservation&& other) noexcept {
    if (this != &other) {
      ShrinkTo(0);
      budget_ = std::exchange(other.budget_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  ~MemoryReservation() { ShrinkTo(0); }

  // Gives back all but `bytes` (no-op when it holds no more).
  void ShrinkTo(int64_t bytes) {
    const int64_t kept = std::clamp<int64_t>(bytes, 0, bytes_);
    if (budget_ != nullptr && kept < bytes_) budget_->Release(bytes_ - kept);
    bytes_ = kept;
  }
  int64_t bytes() const { return bytes_; }
  // Gives up the bytes without releasing them: whoever now accounts for them
  // (a batcher that took a task with Task::memory_prepaid) adopts them
  // (Adopt) and releases them in turn. Returns how many.
  int64_t Detach() {
    budget_ = nullptr;
    return std::exchange(bytes_, 0);
  }

 private:
  MemoryBudget* budget_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace normsvc::server
