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
  // After StartDrain: waits until no accepted request is left or `deadline`
  // passes; true if none is left. When it returns true, the Exit that
  // answered the last request has stopped touching the gate (it marks the
  // gate idle under the mutex as its last act), so the gate may be freed.
  bool WaitIdle(absl::Time deadline);
  int64_t in_flight() const;

 private:
  void MarkIdle();

  static constexpr int64_t kDrainingBit = int64_t{1} << 62;
  std::atomic<int64_t> state_{0};              // kDrainingBit | count
  absl::Mutex mutex_;                          // only for the drain's wait
  bool idle_ ABSL_GUARDED_BY(mutex_) = false;  // draining and nothing left
  // A CondVar rather than Mutex::Await: the ThreadSanitizer build annotates
  // CondVar waits (tests/tsan), not Await's internal unlock.
  absl::CondVar became_idle_;
};

}  // namespace normsvc::server
