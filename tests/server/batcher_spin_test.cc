// The idle spin of Batcher::WaitForBatch (BatcherOptions::idle_spin), with a
// real worker thread: a task scheduled while the worker spins, one scheduled
// after the spin has given way to the condition variable, and Close while
// the worker waits are each seen, within a bounded time, by exactly one
// WaitForBatch call.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <thread>

#include "server/batcher.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "test_tasks.h"

namespace normsvc::server {
namespace {

using testing::MakeForwardTask;
using testing::RecordingSink;
using testing::WaitForBatchOnThread;

class BatcherSpinTest : public ::testing::Test {
 protected:
  ServiceMetrics metrics_{{"cpu"}, BuildInfo{"test", "test", "none", "cpu"}};
  MemoryBudget budget_{int64_t{1} << 30};
};

TEST_F(BatcherSpinTest, TasksArrivingDuringAndAfterTheSpinAreTakenAndCloseEndsTheWait) {
  BatcherOptions options;
  options.idle_spin = absl::Milliseconds(200);
  Batcher batcher(options, &budget_, metrics_.device(0), metrics_.rejections());
  RecordingSink during;
  RecordingSink after;

  // Scheduled 20 ms into the worker's 200 ms spin.
  std::future<int64_t> first = WaitForBatchOnThread(batcher);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::unique_ptr<Task> task = MakeForwardTask(3, &during);
  ASSERT_TRUE(batcher.Schedule(task).ok());
  ASSERT_EQ(first.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(first.get(), 3);

  // Scheduled after the spin has ended: the worker sleeps and is woken.
  std::future<int64_t> second = WaitForBatchOnThread(batcher);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ASSERT_EQ(second.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  task = MakeForwardTask(5, &after);
  ASSERT_TRUE(batcher.Schedule(task).ok());
  ASSERT_EQ(second.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(second.get(), 5);

  // Close wakes a waiting worker, which returns no batch.
  std::future<int64_t> third = WaitForBatchOnThread(batcher);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  batcher.Close();
  ASSERT_EQ(third.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(third.get(), -1);

  EXPECT_EQ(during.calls, 1);
  EXPECT_EQ(during.code(), absl::StatusCode::kOk);
  EXPECT_EQ(after.calls, 1);
  EXPECT_EQ(after.code(), absl::StatusCode::kOk);
  EXPECT_EQ(batcher.pending_requests(), 0);
}

TEST_F(BatcherSpinTest, TwoWaitingWorkersTakeTwoTasksOnceEach) {
  BatcherOptions options;
  options.idle_spin = absl::Milliseconds(50);
  options.max_batch_tasks = 1;  // one task a batch: each worker gets one
  Batcher batcher(options, &budget_, metrics_.device(0), metrics_.rejections());
  RecordingSink sinks[2];
  std::future<int64_t> a = WaitForBatchOnThread(batcher);
  std::future<int64_t> b = WaitForBatchOnThread(batcher);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<Task> task = MakeForwardTask(i + 1, &sinks[i]);
    ASSERT_TRUE(batcher.Schedule(task).ok());
  }
  ASSERT_EQ(a.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  ASSERT_EQ(b.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const int64_t ra = a.get();
  const int64_t rb = b.get();
  EXPECT_EQ(ra + rb, 3);
  EXPECT_NE(ra, rb);
  EXPECT_EQ(sinks[0].calls, 1);
  EXPECT_EQ(sinks[1].calls, 1);
  batcher.Close();
}

}  // namespace
}  // namespace normsvc::server
