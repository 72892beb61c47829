// Bounds how long the process takes to stop once it has been told to.
//
// Server::Stop waits for accepted requests up to --drain_timeout_s and then
// joins its threads; a batch hung on a device (a kernel that never ends)
// would hold that join, and the process, forever. The watchdog runs beside
// the stop: when the stop overruns its limit, or when a second stop signal
// arrives (an operator's "stop now"), it calls `on_expiry` once, on its own
// thread. main's `on_expiry` logs the reason and ends the process.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "absl/time/time.h"

namespace normsvc::server {

// How far past --drain_timeout_s the whole stop may run before the watchdog
// ends the process: the drain itself is bounded by the timeout; after it
// come gRPC's shutdown (at least 1 s), open streams' last callbacks (at most
// 5 s) and the metrics endpoint (at most 2 s).
inline constexpr absl::Duration kStopOverrunLimit = absl::Seconds(10);

class StopWatchdog {
 public:
  enum class Reason { kTimeout, kSecondSignal };
  // (reason, signal number; 0 for kTimeout)
  using ExpiryFn = std::function<void(Reason, int)>;

  // Starts the watch: `on_expiry` runs if the watchdog is not destroyed
  // within `limit`, or at once when one of `signals` is delivered to the
  // process or to the watchdog's thread meanwhile. `signals` must be blocked
  // in every thread of the process (the watchdog's thread inherits the
  // caller's mask), so that this thread's sigtimedwait is what takes them.
  StopWatchdog(absl::Duration limit, const sigset_t& signals, ExpiryFn on_expiry);
  // Disarms and joins: once the destructor has begun, `on_expiry` is not
  // called (unless it already runs, which the destructor then waits for).
  ~StopWatchdog();

  StopWatchdog(const StopWatchdog&) = delete;
  StopWatchdog& operator=(const StopWatchdog&) = delete;

  // The watchdog's thread, for a test to direct a signal at it.
  std::thread::native_handle_type thread_handle() { return thread_.native_handle(); }

 private:
  void Watch(std::chrono::steady_clock::time_point deadline);

  const sigset_t signals_;
  const ExpiryFn on_expiry_;
  std::atomic<bool> disarmed_{false};
  std::thread thread_;
};

}  // namespace normsvc::server
