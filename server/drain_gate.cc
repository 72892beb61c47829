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
  if (now == kDrainingBit) MarkIdle();  // the last request while draining
}

void DrainGate::StartDrain() {
  const int64_t previous = state_.fetch_or(kDrainingBit, std::memory_order_acq_rel);
  if (previous == 0) MarkIdle();  // nothing in flight: idle at once
}

void DrainGate::MarkIdle() {
  absl::MutexLock lock(&mutex_);
  idle_ = true;
  became_idle_.SignalAll();
}

bool DrainGate::draining() const {
  return (state_.load(std::memory_order_acquire) & kDrainingBit) != 0;
}

int64_t DrainGate::in_flight() const {
  return state_.load(std::memory_order_acquire) & ~kDrainingBit;
}

bool DrainGate::WaitIdle(absl::Time deadline) {
  // Not in_flight() == 0: the Exit that brought the count to zero may not
  // have reached its MarkIdle yet, and freeing the gate then would pull the
  // mutex from under it.
  absl::MutexLock lock(&mutex_);
  while (!idle_) {
    if (became_idle_.WaitWithDeadline(&mutex_, deadline)) return idle_;
  }
  return true;
}

}  // namespace normsvc::server
