#include "server/drain_gate.h"

namespace normsvc::server {

bool DrainGate::TryEnter() {
  const int64_t previous = state_.fetch_add(1, std::memory_order_acq_rel);
  if ((previous & kDrainingBit) == 0) return true;
  Exit();  // undo; wakes WaitIdle if this was the last one
  return false;
}

void DrainGate::Exit() {
  const int64_t now = state_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if (now == kDrainingBit) {
    absl::MutexLock lock(&mutex_);
    idle_.SignalAll();
  }
}

void DrainGate::StartDrain() { state_.fetch_or(kDrainingBit, std::memory_order_acq_rel); }

bool DrainGate::draining() const {
  return (state_.load(std::memory_order_acquire) & kDrainingBit) != 0;
}

int64_t DrainGate::in_flight() const {
  return state_.load(std::memory_order_acquire) & ~kDrainingBit;
}

bool DrainGate::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  while (in_flight() != 0) {
    if (idle_.WaitWithDeadline(&mutex_, deadline)) return in_flight() == 0;
  }
  return true;
}

}  // namespace normsvc::server
