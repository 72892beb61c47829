#include "server/stop_watchdog.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <utility>

#include "server/thread_name.h"

namespace normsvc::server {
namespace {

// How often the watching thread looks at the disarm flag: sigtimedwait
// cannot be woken by the destructor, so it waits in slices.
constexpr absl::Duration kWatchSlice = absl::Milliseconds(50);

}  // namespace

StopWatchdog::StopWatchdog(absl::Duration limit, const sigset_t& signals, ExpiryFn on_expiry)
    : signals_(signals), on_expiry_(std::move(on_expiry)) {
  // The monotonic clock: a wall clock stepped during the stop must not move
  // the deadline.
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(limit);
  thread_ = std::thread([this, deadline] { Watch(deadline); });
}

StopWatchdog::~StopWatchdog() {
  disarmed_.store(true, std::memory_order_release);
  thread_.join();
}

void StopWatchdog::Watch(std::chrono::steady_clock::time_point deadline) {
  NameCurrentThread("stop_watchdog");
  while (!disarmed_.load(std::memory_order_acquire)) {
    const absl::Duration remaining = absl::FromChrono(deadline - std::chrono::steady_clock::now());
    if (remaining <= absl::ZeroDuration()) {
      on_expiry_(Reason::kTimeout, 0);
      return;
    }
    const timespec slice = absl::ToTimespec(std::min(remaining, kWatchSlice));
    const int signal_number = sigtimedwait(&signals_, nullptr, &slice);
    if (signal_number > 0 && !disarmed_.load(std::memory_order_acquire)) {
      on_expiry_(Reason::kSecondSignal, signal_number);
      return;
    }
    // -1: the slice passed (EAGAIN) or another signal interrupted (EINTR).
  }
}

}  // namespace normsvc::server
