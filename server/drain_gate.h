// Counts accepted, unanswered requests, and refuses new ones once draining
// starts: the "refuse new with UNAVAILABLE, finish what was accepted" half
// of the shutdown. Enter/Exit are lock-free; only the drain waits.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace normsvc::server {

class DrainGate {
 public:
  // True: the request is accepted and must be followed by exactly one Exit.
  // False once StartDrain was called.
  bool TryEnter();
  void Exit();

  void StartDrain();
  bool draining() const;
  // Waits until no accepted request is left or `deadline` passes; true if
  // none is left.
  bool WaitIdle(absl::Time deadline);
  int64_t in_flight() const;

 private:
  static constexpr int64_t kDrainingBit = int64_t{1} << 62;
  std::atomic<int64_t> state_{0};  // kDrainingBit | count
  absl::Mutex mutex_;              // only for waking WaitIdle
  absl::CondVar idle_;
};

}  // namespace normsvc::server
