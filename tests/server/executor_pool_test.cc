// Routing in the executor pool: the fewest queued rows among queues with
// room; when devices fail, unhealthy executors get no work, and when none is
// healthy every request is refused UNAVAILABLE and the pool reports it once
// (the server turns its health NOT_SERVING).
#include "server/executor_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "server/memory_budget.h"
#include "server/metrics.h"
#include "test_tasks.h"

namespace normsvc::server {
namespace {

using testing::RecordingSink;

// Runs nothing (its worker threads are never started); healthy() is set by
// the test, as a GPU executor's is by an unrecoverable CUDA error.
class SwitchableExecutor final : public Executor {
 public:
  explicit SwitchableExecutor(std::string label) { device_.label = std::move(label); }
  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return 1; }
  int64_t max_batch_staging_bytes() const override { return 0; }
  BatchResult Run(const Batch& batch, int) override {
    BatchResult result;
    result.statuses.assign(batch.tasks.size(), absl::OkStatus());
    return result;
  }
  absl::StatusOr<DeviceBuffer> Upload(const void*, std::size_t) override {
    return absl::UnimplementedError("test executor");
  }
  bool healthy() const override { return healthy_.load(); }

  std::atomic<bool> healthy_{true};

 private:
  DeviceDescription device_;
};

class ExecutorPoolTest : public ::testing::Test {
 protected:
  ServiceMetrics metrics_{{"cuda:0", "cuda:1"}, BuildInfo{"test", "test", "none", "cuda"}};
  MemoryBudget budget_{int64_t{1} << 30};
  std::deque<RecordingSink> sinks_;
  SwitchableExecutor* executors_[2] = {nullptr, nullptr};

  std::unique_ptr<ExecutorPool> MakePool(BatcherOptions batching = {}) {
    std::vector<std::unique_ptr<Executor>> executors;
    for (int i = 0; i < 2; ++i) {
      auto executor = std::make_unique<SwitchableExecutor>("cuda:" + std::to_string(i));
      executors_[i] = executor.get();
      executors.push_back(std::move(executor));
    }
    return std::make_unique<ExecutorPool>(std::move(executors), batching, &budget_, metrics_);
  }
  std::unique_ptr<Task> MakeTask(int64_t rows) {
    return testing::MakeForwardTask(rows, &sinks_.emplace_back());
  }
};

TEST_F(ExecutorPoolTest, UnhealthyExecutorsGetNoWorkAndNoneHealthyIsReportedOnce) {
  std::unique_ptr<ExecutorPool> pool = MakePool();
  int reports = 0;
  pool->SetNoHealthyExecutorCallback([&reports] { ++reports; });

  // One device failed: every request goes to the other.
  executors_[0]->healthy_ = false;
  for (int i = 0; i < 4; ++i) {
    std::unique_ptr<Task> task = MakeTask(i + 1);
    ASSERT_TRUE(pool->Schedule(task).ok());
    EXPECT_EQ(task, nullptr);
  }
  EXPECT_EQ(pool->batcher(0).pending_requests(), 0);
  EXPECT_EQ(pool->batcher(1).pending_requests(), 4);
  EXPECT_EQ(reports, 0);

  // Both failed: refused at once, the task stays with the caller, reported once.
  executors_[1]->healthy_ = false;
  for (int i = 0; i < 3; ++i) {
    std::unique_ptr<Task> task = MakeTask(1);
    const absl::Status status = pool->Schedule(task);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(status.message().find("no healthy executor"), std::string::npos) << status;
    EXPECT_NE(task, nullptr);
  }
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(pool->batcher(1).pending_requests(), 4);

  // The queued requests are still answered (UNAVAILABLE when the pool shuts
  // down without having run them), each exactly once.
  pool.reset();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sinks_[i].calls, 1) << i;
    EXPECT_EQ(sinks_[i].code(), absl::StatusCode::kUnavailable) << i;
  }
  for (int i = 4; i < 7; ++i) EXPECT_EQ(sinks_[i].calls, 0) << i;  // refused, never accepted
  EXPECT_EQ(budget_.used(), 0);
}

// A backward call reserves its memory (ReserveMemory) and then schedules:
// the reservation must not move the routing's tie-break, or with every queue
// empty at each request (a worker takes each task at once) every other
// executor would get them all. Charged once, released once.
TEST_F(ExecutorPoolTest, ReservingMemoryLeavesTheRoutingAlone) {
  std::unique_ptr<ExecutorPool> pool = MakePool();
  int ran[2] = {0, 0};
  for (int i = 0; i < 8; ++i) {
    std::unique_ptr<Task> task = MakeTask(1);
    const int64_t bytes = task->memory_bytes();
    absl::StatusOr<MemoryReservation> reserved = pool->ReserveMemory(bytes, absl::InfiniteFuture());
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    EXPECT_EQ(budget_.used(), bytes);
    ASSERT_TRUE(pool->Schedule(task, *std::move(reserved)).ok());
    EXPECT_EQ(budget_.used(), bytes);  // not charged again
    // Run it at once, as a free worker would: both queues are empty again.
    for (int e = 0; e < 2; ++e) {
      std::optional<Batch> batch = pool->batcher(e).TryTakeBatch();
      if (!batch) continue;
      ++ran[e];
      for (auto& done : batch->tasks) pool->batcher(e).Finish(std::move(done), absl::OkStatus());
      pool->batcher(e).BatchDone();
    }
    EXPECT_EQ(budget_.used(), 0);
  }
  EXPECT_EQ(ran[0], 4);
  EXPECT_EQ(ran[1], 4);

  // A passed deadline is refused before anything is reserved.
  const absl::StatusOr<MemoryReservation> late =
      pool->ReserveMemory(64, absl::Now() - absl::Seconds(1));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  const absl::StatusOr<MemoryReservation> too_large =
      pool->ReserveMemory(budget_.limit() + 1, absl::InfiniteFuture());
  EXPECT_EQ(too_large.status().code(), absl::StatusCode::kInvalidArgument) << too_large.status();
  EXPECT_EQ(budget_.used(), 0);
}

TEST_F(ExecutorPoolTest, AFullQueueIsPassedOverForOneWithRoomEvenWithMoreRows) {
  BatcherOptions batching;
  batching.max_queue_size = 3;
  std::unique_ptr<ExecutorPool> pool = MakePool(batching);
  // Executor 0's queue fills with three 1-row requests, executor 1's holds
  // one 100-row request: by rows executor 0 is the less loaded.
  executors_[1]->healthy_ = false;
  for (int i = 0; i < 3; ++i) {
    std::unique_ptr<Task> task = MakeTask(1);
    ASSERT_TRUE(pool->Schedule(task).ok());
  }
  executors_[1]->healthy_ = true;
  executors_[0]->healthy_ = false;
  std::unique_ptr<Task> large = MakeTask(100);
  ASSERT_TRUE(pool->Schedule(large).ok());
  executors_[0]->healthy_ = true;
  ASSERT_EQ(pool->batcher(0).pending_requests(), 3);
  ASSERT_EQ(pool->batcher(1).pending_requests(), 1);

  // Executor 1 takes requests until its queue is full too; then they are
  // refused RESOURCE_EXHAUSTED and stay with the caller.
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<Task> task = MakeTask(1);
    const absl::Status status = pool->Schedule(task);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(task, nullptr);
  }
  EXPECT_EQ(pool->batcher(0).pending_requests(), 3);
  EXPECT_EQ(pool->batcher(1).pending_requests(), 3);
  std::unique_ptr<Task> refused = MakeTask(1);
  const absl::Status status = pool->Schedule(refused);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(refused, nullptr);
  pool.reset();
  EXPECT_EQ(budget_.used(), 0);
}

// Runs batches at once, or holds them (a hung device) until released.
class HangingExecutor final : public Executor {
 public:
  explicit HangingExecutor(std::string label) { device_.label = std::move(label); }
  ~HangingExecutor() override { Release(); }
  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return 1; }
  int64_t max_batch_staging_bytes() const override { return 0; }
  BatchResult Run(const Batch& batch, int) override {
    runs.fetch_add(1);
    if (hang.load()) {
      std::unique_lock<std::mutex> lock(mutex_);
      released_cv_.wait(lock, [this] { return released_; });
    }
    BatchResult result;
    result.statuses.assign(batch.tasks.size(), absl::OkStatus());
    return result;
  }
  absl::StatusOr<DeviceBuffer> Upload(const void*, std::size_t) override {
    return absl::UnimplementedError("test executor");
  }
  bool healthy() const override { return true; }
  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    released_cv_.notify_all();
  }

  std::atomic<bool> hang{false};
  std::atomic<int> runs{0};

 private:
  DeviceDescription device_;
  // std:: primitives, not absl::Notification: the ThreadSanitizer build
  // annotates absl's Lock, Unlock and CondVar waits only.
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
};

// --batch_timeout_s: a batch that runs past the timeout takes its executor
// out of service (the other one takes the work); with none left, the
// no-healthy callback runs once and requests are refused UNAVAILABLE.
TEST_F(ExecutorPoolTest, AStuckBatchTakesItsExecutorOutOfService) {
  std::vector<std::unique_ptr<Executor>> executors;
  HangingExecutor* hanging[2];
  for (int i = 0; i < 2; ++i) {
    auto executor = std::make_unique<HangingExecutor>("cuda:" + std::to_string(i));
    hanging[i] = executor.get();
    executors.push_back(std::move(executor));
  }
  auto pool = std::make_unique<ExecutorPool>(std::move(executors), BatcherOptions{}, &budget_,
                                             metrics_, /*reply_threads=*/0);
  std::atomic<int> reports{0};
  pool->SetNoHealthyExecutorCallback([&reports] { reports.fetch_add(1); });
  pool->Start();
  // Long enough that a batch of the executor that does not hang, descheduled
  // on a loaded machine (ThreadSanitizer), never passes for a stuck one.
  constexpr auto kTimeout = absl::Seconds(1);
  pool->WatchForStuckBatches(kTimeout);
  // Whether `condition` holds within 10 s (polled each millisecond).
  auto eventually = [](const std::function<bool()>& condition) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!condition() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    return condition();
  };
  auto wait_until_unusable = [&](int i) { return eventually([&] { return !pool->usable(i); }); };

  // Executor 0 hangs on its first batch; a second task queues behind it.
  hanging[0]->hang = true;
  std::unique_ptr<Task> stuck = MakeTask(1);
  const absl::Time hung_at = absl::Now();  // before the batch can start
  ASSERT_TRUE(pool->batcher(0).Schedule(stuck).ok());
  eventually([&] { return hanging[0]->runs.load() > 0; });
  ASSERT_EQ(hanging[0]->runs.load(), 1);
  std::unique_ptr<Task> queued = MakeTask(1);
  RecordingSink& queued_sink = sinks_.back();
  ASSERT_TRUE(pool->batcher(0).Schedule(queued).ok());
  ASSERT_TRUE(wait_until_unusable(0)) << "executor 0 never left service";
  EXPECT_GE(absl::Now() - hung_at, kTimeout);
  EXPECT_FALSE(hanging[0]->in_service());  // what the parameter store checks
  EXPECT_TRUE(pool->usable(1));
  EXPECT_EQ(reports.load(), 0);
  // Its batcher is closed (just after it left service): nothing more can
  // queue there.
  ASSERT_TRUE(eventually([&] { return pool->batcher(0).closed(); }));
  std::unique_ptr<Task> late = MakeTask(1);
  RecordingSink& late_sink = sinks_.back();
  const absl::Status late_refusal = pool->batcher(0).Schedule(late);
  EXPECT_EQ(late_refusal.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(late_refusal.message().find("cuda:0 is out of service"), std::string::npos)
      << late_refusal;
  ASSERT_NE(late, nullptr);  // refused: still the caller's
  late.reset();

  // Everything goes to executor 1 now.
  for (int i = 0; i < 5; ++i) {
    std::unique_ptr<Task> task = MakeTask(1);
    ASSERT_TRUE(pool->Schedule(task).ok());
  }
  eventually([&] { return hanging[1]->runs.load() > 0; });
  EXPECT_GE(hanging[1]->runs.load(), 1);
  EXPECT_EQ(hanging[0]->runs.load(), 1);

  // Executor 1 hangs too: none is left, reported once, and refused.
  hanging[1]->hang = true;
  std::unique_ptr<Task> second = MakeTask(1);
  ASSERT_TRUE(pool->Schedule(second).ok());
  ASSERT_TRUE(wait_until_unusable(1)) << "executor 1 never left service";
  eventually([&] { return reports.load() > 0; });
  EXPECT_EQ(reports.load(), 1);
  std::unique_ptr<Task> refused = MakeTask(1);
  EXPECT_EQ(pool->Schedule(refused).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(reports.load(), 1);

  // The devices come back (here): every accepted task is answered once.
  hanging[0]->Release();
  hanging[1]->Release();
  pool->Close();
  pool->Join();
  EXPECT_EQ(hanging[0]->runs.load(), 1);  // only the stuck batch reached it
  pool.reset();                           // the executors with it
  for (size_t i = 0; i + 1 < sinks_.size(); ++i) {
    if (&sinks_[i] == &late_sink) continue;
    EXPECT_EQ(sinks_[i].calls, 1) << i;
  }
  EXPECT_EQ(late_sink.calls, 0);      // refused, never accepted
  EXPECT_EQ(sinks_.back().calls, 0);  // likewise
  // The task queued behind the stuck batch was answered when its executor
  // left service, not run after the device came back.
  ASSERT_TRUE(queued_sink.result.has_value());
  EXPECT_EQ(queued_sink.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(queued_sink.result->message().find("while the request was queued"), std::string::npos)
      << *queued_sink.result;
  EXPECT_EQ(budget_.used(), 0);
}

// A batch that a worker takes for an executor out of service is answered
// UNAVAILABLE without reaching the executor's device.
TEST_F(ExecutorPoolTest, ABatchForAnExecutorOutOfServiceNeverReachesIt) {
  std::vector<std::unique_ptr<Executor>> executors;
  auto only = std::make_unique<HangingExecutor>("cuda:0");
  HangingExecutor* executor = only.get();
  executors.push_back(std::move(only));
  auto pool = std::make_unique<ExecutorPool>(std::move(executors), BatcherOptions{}, &budget_,
                                             metrics_, /*reply_threads=*/0);
  pool->Start();
  executor->TakeOutOfService();
  constexpr int kTasks = 3;
  for (int i = 0; i < kTasks; ++i) {
    std::unique_ptr<Task> task = MakeTask(i + 1);
    ASSERT_TRUE(pool->batcher(0).Schedule(task).ok());  // the routing would refuse it
  }
  pool->Close();
  pool->Join();  // every task answered
  EXPECT_EQ(executor->runs.load(), 0);
  pool.reset();
  ASSERT_EQ(sinks_.size(), static_cast<size_t>(kTasks));
  for (const RecordingSink& sink : sinks_) {
    EXPECT_EQ(sink.calls, 1);
    ASSERT_TRUE(sink.result.has_value());
    EXPECT_EQ(sink.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(sink.result->message().find("cuda:0 is out of service"), std::string::npos)
        << *sink.result;
  }
  EXPECT_EQ(budget_.used(), 0);
}

}  // namespace
}  // namespace normsvc::server
