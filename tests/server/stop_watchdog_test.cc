// StopWatchdog: silent when disarmed in time, fires once when the stop
// overruns its limit, and at once on a second stop signal. The signal used
// here is SIGUSR2, directed at the watchdog's thread only (other threads of
// the test process do not block it).
#include "server/stop_watchdog.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace normsvc::server {
namespace {

sigset_t TestSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGUSR2);
  return signals;
}

// Blocks the test signal in the calling thread for its scope; a watchdog
// made meanwhile inherits the mask.
class BlockedSignals {
 public:
  BlockedSignals() : signals_(TestSignals()) { pthread_sigmask(SIG_BLOCK, &signals_, &previous_); }
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

 private:
  sigset_t signals_, previous_;
};

// std::promise rather than absl::Notification: the ThreadSanitizer build
// annotates absl's Lock, Unlock and CondVar waits only.
struct Expiry {
  std::atomic<int> calls{0};
  std::atomic<int> reason{-1};
  std::atomic<int> signal{-1};
  std::promise<void> fired;
  std::future<void> fired_future = fired.get_future();

  StopWatchdog::ExpiryFn Fn() {
    return [this](StopWatchdog::Reason r, int s) {
      reason = static_cast<int>(r);
      signal = s;
      if (calls.fetch_add(1) == 0) fired.set_value();
    };
  }
  bool WaitFired(std::chrono::seconds timeout) {
    return fired_future.wait_for(timeout) == std::future_status::ready;
  }
};

TEST(StopWatchdogTest, DisarmedBeforeItsLimitNeverFires) {
  BlockedSignals blocked;
  Expiry expiry;
  {
    StopWatchdog watchdog(absl::Milliseconds(300), TestSignals(), expiry.Fn());
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::SleepFor(absl::Milliseconds(500));  // past the limit it would have had
  EXPECT_EQ(expiry.calls.load(), 0);
}

TEST(StopWatchdogTest, FiresOnceWhenTheStopOverrunsItsLimit) {
  BlockedSignals blocked;
  Expiry expiry;
  const auto start = std::chrono::steady_clock::now();
  StopWatchdog watchdog(absl::Milliseconds(150), TestSignals(), expiry.Fn());
  ASSERT_TRUE(expiry.WaitFired(std::chrono::seconds(10)));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_EQ(expiry.reason.load(), static_cast<int>(StopWatchdog::Reason::kTimeout));
  EXPECT_EQ(expiry.signal.load(), 0);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(expiry.calls.load(), 1);
}

TEST(StopWatchdogTest, ASecondSignalFiresAtOnce) {
  BlockedSignals blocked;
  Expiry expiry;
  StopWatchdog watchdog(absl::Seconds(60), TestSignals(), expiry.Fn());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(expiry.calls.load(), 0);
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(pthread_kill(watchdog.thread_handle(), SIGUSR2), 0);
  ASSERT_TRUE(expiry.WaitFired(std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(2));
  EXPECT_EQ(expiry.reason.load(), static_cast<int>(StopWatchdog::Reason::kSecondSignal));
  EXPECT_EQ(expiry.signal.load(), SIGUSR2);
  EXPECT_EQ(expiry.calls.load(), 1);
}

}  // namespace
}  // namespace normsvc::server
