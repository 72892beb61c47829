// detail::RunTasks (kernels/src/run_tasks.h), the reference kernels'
// fan-out: every task runs exactly once when threads cannot be started, and
// a task out of memory turns into kResourceExhausted instead of ending the
// process.
#include "run_tasks.h"

#include <atomic>
#include <cerrno>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace normsvc::kernels::detail {
namespace {

// Starts the first `allowed` threads, then fails as std::thread does when
// the system has no thread left to give.
struct FailingThreadStarter {
  int allowed;
  std::atomic<int>* attempts;
  template <typename Fn>
  std::thread operator()(Fn&& fn) const {
    if (attempts->fetch_add(1) >= allowed) {
      throw std::system_error(EAGAIN, std::generic_category(), "thread");
    }
    return std::thread(std::forward<Fn>(fn));
  }
};

TEST(RunTasksTest, EveryTaskRunsOnceWhenThreadsCannotBeStarted) {
  constexpr int kTasks = 9;
  for (int allowed : {0, 1, 3, kTasks}) {
    std::vector<std::atomic<int>> runs(kTasks);
    std::atomic<int> attempts{0};
    const Status status = RunTasks(
        kTasks, [&](int t) { runs[t].fetch_add(1); }, FailingThreadStarter{allowed, &attempts});
    EXPECT_TRUE(status.ok()) << status.message();
    for (int t = 0; t < kTasks; ++t)
      EXPECT_EQ(runs[t].load(), 1) << "task " << t << ", " << allowed;
    // One attempt a task beyond the first until the first refusal.
    EXPECT_EQ(attempts.load(), std::min(allowed + 1, kTasks - 1)) << allowed;
  }
}

TEST(RunTasksTest, ATaskOutOfMemoryIsResourceExhaustedAndTheOthersStillRun) {
  constexpr int kTasks = 6;
  for (int failing : {0, 4}) {  // the calling thread's task, a worker's
    std::vector<std::atomic<int>> finished(kTasks);
    const Status status = RunTasks(kTasks, [&](int t) {
      if (t == failing) throw std::bad_alloc();
      finished[t].fetch_add(1);
    });
    EXPECT_EQ(status.code(), Code::kResourceExhausted) << failing;
    EXPECT_NE(status.message().find("out of memory"), std::string::npos);
    for (int t = 0; t < kTasks; ++t) EXPECT_EQ(finished[t].load(), t == failing ? 0 : 1) << t;
  }
}

TEST(RunTasksTest, NoTasksAndOneTaskRunOnTheCallingThread) {
  std::atomic<int> attempts{0};
  int runs = 0;
  EXPECT_TRUE(RunTasks(
                  0, [&](int) { ++runs; }, FailingThreadStarter{0, &attempts})
                  .ok());
  EXPECT_EQ(runs, 0);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  EXPECT_TRUE(RunTasks(
                  1,
                  [&](int) {
                    ++runs;
                    ran_on = std::this_thread::get_id();
                  },
                  FailingThreadStarter{0, &attempts})
                  .ok());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(ran_on, caller);
  EXPECT_EQ(attempts.load(), 0);
}

}  // namespace
}  // namespace normsvc::kernels::detail
