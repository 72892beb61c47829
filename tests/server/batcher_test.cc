// The batcher's contract, driven without threads: a fake clock, TryTakeBatch
// and RunBatch with a fake executor, so every batch formed is deterministic.
#include "server/batcher.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <optional>

#include "server/batch_worker.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/reply_pool.h"
#include "test_tasks.h"

namespace normsvc::server {
namespace {

using testing::MakeForwardTask;
using testing::RecordingSink;

// Runs nothing: records each batch's task ids and returns statuses chosen by
// the test.
class FakeExecutor final : public Executor {
 public:
  FakeExecutor() { device_.label = "cpu"; }
  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return 1; }
  int64_t max_batch_staging_bytes() const override { return 0; }
  BatchResult Run(const Batch& batch, int) override {
    BatchResult result;
    std::vector<int64_t> rows;
    for (const auto& task : batch.tasks) {
      rows.push_back(task->rows);
      result.statuses.push_back(status_for_rows ? status_for_rows(task->rows) : absl::OkStatus());
    }
    batches.push_back(rows);
    result.kernel_seconds = 1e-3;
    result.kernel_bytes = batch.input_bytes + batch.output_bytes;
    return result;
  }
  absl::StatusOr<DeviceBuffer> Upload(const void*, std::size_t) override {
    return absl::UnimplementedError("fake");
  }
  bool healthy() const override { return true; }

  std::vector<std::vector<int64_t>> batches;
  std::function<absl::Status(int64_t rows)> status_for_rows;

 private:
  DeviceDescription device_;
};

class BatcherTest : public ::testing::Test {
 protected:
  absl::Time now_ = absl::FromUnixSeconds(1000000);
  ServiceMetrics metrics_{{"cpu"}, BuildInfo{"test", "test", "none", "cpu"}};
  MemoryBudget budget_{int64_t{1} << 30};
  std::deque<RecordingSink> sinks_;

  std::unique_ptr<Batcher> MakeBatcher(BatcherOptions options, MemoryBudget* budget = nullptr) {
    return std::make_unique<Batcher>(options, budget ? budget : &budget_, metrics_.device(0),
                                     metrics_.rejections(), [this] { return now_; });
  }
  // A task of `rows` rows (16 input bytes and 16 output bytes per row).
  std::unique_ptr<Task> MakeTask(int64_t rows, TaskKind kind = TaskKind::kForward,
                                 absl::Time deadline = absl::InfiniteFuture()) {
    std::unique_ptr<Task> task = MakeForwardTask(rows, &sinks_.emplace_back());
    task->kind = kind;
    task->deadline = deadline;
    return task;
  }
  void Schedule(Batcher& batcher, std::unique_ptr<Task> task) {
    ASSERT_TRUE(batcher.Schedule(task).ok());
    ASSERT_EQ(task, nullptr);
  }
  static std::vector<int64_t> RowsOf(const Batch& batch) {
    std::vector<int64_t> rows;
    for (const auto& task : batch.tasks) rows.push_back(task->rows);
    return rows;
  }
  double Count(prometheus::Counter* counter) { return counter->Value(); }
  uint64_t Samples(prometheus::Histogram* histogram) {
    return histogram->Collect().histogram.sample_count;
  }
  double Sum(prometheus::Histogram* histogram) { return histogram->Collect().histogram.sample_sum; }
};

TEST_F(BatcherTest, ZeroDelayTakesEverythingQueuedInFifoOrder) {
  auto batcher = MakeBatcher({});
  for (int64_t rows : {3, 1, 2}) Schedule(*batcher, MakeTask(rows));
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{3, 1, 2}));
  EXPECT_EQ(batch->rows, 6);
  EXPECT_EQ(batch->input_bytes, 96);
  EXPECT_FALSE(batch->more_queued);  // the queue is empty: the executor may spin
  EXPECT_FALSE(batcher->TryTakeBatch());
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
}

TEST_F(BatcherTest, BatchWaitsForTheDelayOfItsOldestTask) {
  BatcherOptions options;
  options.max_queue_delay = absl::Microseconds(100);
  auto batcher = MakeBatcher(options);
  const absl::Time first = now_;
  Schedule(*batcher, MakeTask(1));
  now_ += absl::Microseconds(40);
  Schedule(*batcher, MakeTask(2));
  EXPECT_FALSE(batcher->TryTakeBatch());
  EXPECT_EQ(batcher->NextReadyTime(), first + absl::Microseconds(100));
  now_ = first + absl::Microseconds(99);
  EXPECT_FALSE(batcher->TryTakeBatch());
  now_ = first + absl::Microseconds(100);
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{1, 2}));
  // Queue wait: 100 us and 60 us.
  EXPECT_EQ(Samples(metrics_.device(0).queue_wait_seconds), 2u);
  EXPECT_NEAR(Sum(metrics_.device(0).queue_wait_seconds), 160e-6, 1e-9);
  EXPECT_EQ(batcher->NextReadyTime(), absl::InfiniteFuture());
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
}

TEST_F(BatcherTest, MaxRowsClosesTheBatchBeforeTheDelay) {
  BatcherOptions options;
  options.max_queue_delay = absl::Seconds(1);
  options.max_batch_rows = 10;
  auto batcher = MakeBatcher(options);
  Schedule(*batcher, MakeTask(4));
  Schedule(*batcher, MakeTask(4));
  EXPECT_FALSE(batcher->TryTakeBatch());  // 8 rows < 10
  Schedule(*batcher, MakeTask(4));        // 12 rows queued: ready
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{4, 4}));  // a third would exceed 10
  EXPECT_TRUE(batch->more_queued);                          // the third still waits
  EXPECT_FALSE(batcher->TryTakeBatch());                    // 4 rows left, waiting for the delay
  EXPECT_EQ(batcher->pending_rows(), 4);
  now_ += absl::Seconds(1);
  std::optional<Batch> rest = batcher->TryTakeBatch();
  ASSERT_TRUE(rest);
  EXPECT_EQ(RowsOf(*rest), (std::vector<int64_t>{4}));
  EXPECT_FALSE(rest->more_queued);
  for (auto* b : {&*batch, &*rest}) {
    for (auto& task : b->tasks) batcher->Finish(std::move(task), absl::OkStatus());
  }
}

TEST_F(BatcherTest, MaxBytesClosesTheBatch) {
  BatcherOptions options;
  options.max_queue_delay = absl::Seconds(1);
  options.max_batch_bytes = 100;  // 16 bytes per row
  auto batcher = MakeBatcher(options);
  Schedule(*batcher, MakeTask(3));  // 48
  Schedule(*batcher, MakeTask(3));  // 96
  EXPECT_FALSE(batcher->TryTakeBatch());
  Schedule(*batcher, MakeTask(1));  // 112 >= 100: ready
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(batch->input_bytes, 96);
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
}

TEST_F(BatcherTest, StagingCapacityClosesTheBatch) {
  BatcherOptions options;
  options.max_batch_staging_bytes = 200;  // 32 staging bytes per row
  auto batcher = MakeBatcher(options);
  for (int64_t rows : {2, 3, 2}) Schedule(*batcher, MakeTask(rows));  // 64, 160, 224
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{2, 3}));
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
}

TEST_F(BatcherTest, OversizedTaskRunsInABatchOfItsOwn) {
  BatcherOptions options;
  options.max_batch_rows = 10;
  auto batcher = MakeBatcher(options);
  Schedule(*batcher, MakeTask(1));
  Schedule(*batcher, MakeTask(100));
  Schedule(*batcher, MakeTask(2));
  std::vector<std::vector<int64_t>> batches;
  while (std::optional<Batch> batch = batcher->TryTakeBatch()) {
    batches.push_back(RowsOf(*batch));
    for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
  }
  EXPECT_EQ(batches, (std::vector<std::vector<int64_t>>{{1}, {100}, {2}}));
  for (const RecordingSink& sink : sinks_) EXPECT_EQ(sink.calls, 1);
}

TEST_F(BatcherTest, BackwardTasksRunAlone) {
  auto batcher = MakeBatcher({});
  Schedule(*batcher, MakeTask(1));
  Schedule(*batcher, MakeTask(2));
  Schedule(*batcher, MakeTask(3, TaskKind::kBackward));
  Schedule(*batcher, MakeTask(4, TaskKind::kBackward));
  Schedule(*batcher, MakeTask(5));
  std::vector<std::vector<int64_t>> batches;
  std::vector<bool> more_queued;
  while (std::optional<Batch> batch = batcher->TryTakeBatch()) {
    batches.push_back(RowsOf(*batch));
    more_queued.push_back(batch->more_queued);
    for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
  }
  EXPECT_EQ(batches, (std::vector<std::vector<int64_t>>{{1, 2}, {3}, {4}, {5}}));
  // Whether requests still waited as each batch closed, backward ones too.
  EXPECT_EQ(more_queued, (std::vector<bool>{true, true, true, false}));
}

TEST_F(BatcherTest, TaskWhoseDeadlinePassesWhileQueuedLeavesBeforeLaunch) {
  BatcherOptions options;
  options.max_queue_delay = absl::Microseconds(100);
  auto batcher = MakeBatcher(options);
  Schedule(*batcher, MakeTask(1, TaskKind::kForward, now_ + absl::Microseconds(50)));
  Schedule(*batcher, MakeTask(2));
  Schedule(*batcher, MakeTask(3, TaskKind::kForward, now_ + absl::Microseconds(60)));
  now_ += absl::Microseconds(100);
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{2}));
  ASSERT_TRUE(sinks_[0].result && sinks_[2].result);
  EXPECT_EQ(sinks_[0].result->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sinks_[2].result->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sinks_[1].calls, 0);
  EXPECT_EQ(Count(metrics_.rejections().deadline_exceeded), 2);
  EXPECT_EQ(budget_.used(), 2 * 32);  // only the task in the batch still holds bytes
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
  EXPECT_EQ(budget_.used(), 0);
}

// When a queued request's deadline passes, gRPC cancels its call too: the
// answer is still DEADLINE_EXCEEDED, and it comes at the deadline, not when
// the batch would close.
TEST_F(BatcherTest, ExpiredTaskIsAnsweredAtItsDeadlineEvenWhenAlsoCancelled) {
  BatcherOptions options;
  options.max_queue_delay = absl::Seconds(1);
  auto batcher = MakeBatcher(options);
  const absl::Time deadline = now_ + absl::Milliseconds(20);
  Schedule(*batcher, MakeTask(1, TaskKind::kForward, deadline));
  Schedule(*batcher, MakeTask(2));
  EXPECT_EQ(batcher->NextReadyTime(), deadline);
  now_ = deadline;
  sinks_[0].cancelled = true;
  EXPECT_FALSE(batcher->TryTakeBatch());  // the second task waits for its delay
  ASSERT_TRUE(sinks_[0].result);
  EXPECT_EQ(sinks_[0].result->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Count(metrics_.rejections().deadline_exceeded), 1);
  EXPECT_EQ(Count(metrics_.rejections().cancelled), 0);
  const absl::Time enqueued = deadline - absl::Milliseconds(20);
  EXPECT_EQ(batcher->NextReadyTime(), enqueued + absl::Seconds(1));  // the next head's delay
  EXPECT_EQ(budget_.used(), 2 * 32);
}

// Behind a task without a deadline, an expiring one is still answered at
// its deadline, while the batch waits for its delay and while a held queue
// waits for the running batch (overlap_min_bytes).
TEST_F(BatcherTest, ExpiredTaskBehindTheHeadIsAnsweredAtItsDeadline) {
  for (const bool held : {false, true}) {
    SCOPED_TRACE(held ? "held for overlap" : "waiting for the delay");
    BatcherOptions options;
    options.max_queue_delay = held ? absl::ZeroDuration() : absl::Seconds(1);
    options.overlap_min_bytes = held ? int64_t{1} << 20 : 0;
    auto batcher = MakeBatcher(options);
    std::optional<Batch> running;
    if (held) {
      Schedule(*batcher, MakeTask(1));
      running = batcher->TryTakeBatch();  // runs until BatchDone
      ASSERT_TRUE(running);
    }
    const size_t first = sinks_.size();
    const absl::Time enqueued = now_;
    const absl::Time deadline = now_ + absl::Milliseconds(20);
    Schedule(*batcher, MakeTask(2));
    Schedule(*batcher, MakeTask(3, TaskKind::kForward, deadline));
    Schedule(*batcher, MakeTask(4, TaskKind::kForward, deadline + absl::Milliseconds(5)));
    EXPECT_EQ(batcher->NextReadyTime(), deadline);
    now_ = deadline;
    EXPECT_FALSE(batcher->TryTakeBatch());
    EXPECT_EQ(sinks_[first].calls, 0);
    ASSERT_TRUE(sinks_[first + 1].result);
    EXPECT_EQ(sinks_[first + 1].result->code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(sinks_[first + 2].calls, 0);
    EXPECT_EQ(batcher->NextReadyTime(), deadline + absl::Milliseconds(5));
    now_ = deadline + absl::Milliseconds(5);
    EXPECT_FALSE(batcher->TryTakeBatch());
    ASSERT_TRUE(sinks_[first + 2].result);
    EXPECT_EQ(sinks_[first + 2].result->code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(batcher->NextReadyTime(),
              held ? absl::InfiniteFuture() : enqueued + absl::Seconds(1));
    if (held) {
      for (auto& task : running->tasks) batcher->Finish(std::move(task), absl::OkStatus());
      batcher->BatchDone();
    } else {
      now_ = enqueued + absl::Seconds(1);
    }
    std::optional<Batch> batch = batcher->TryTakeBatch();
    ASSERT_TRUE(batch);
    EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{2}));
    for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
    EXPECT_EQ(Count(metrics_.rejections().deadline_exceeded), held ? 4 : 2);
  }
}

// A request that needs more memory than the whole budget can never be
// accepted: it is refused as a limit, not as "retry later".
TEST_F(BatcherTest, TaskLargerThanTheWholeBudgetIsInvalidNotRetryable) {
  MemoryBudget budget(100);  // a task of n rows holds 32 n bytes
  auto batcher = MakeBatcher({}, &budget);
  std::unique_ptr<Task> task = MakeTask(4);  // 128 bytes
  const absl::Status status = batcher->Schedule(task);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("--max_queued_bytes"), absl::string_view::npos) << status;
  EXPECT_NE(task, nullptr);
  EXPECT_EQ(budget.used(), 0);
  Schedule(*batcher, MakeTask(3));             // 96 bytes fit
  std::unique_ptr<Task> second = MakeTask(1);  // fits the limit, not what is left
  EXPECT_EQ(batcher->Schedule(second).code(), absl::StatusCode::kResourceExhausted);
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  for (auto& t : batch->tasks) batcher->Finish(std::move(t), absl::OkStatus());
}

TEST_F(BatcherTest, TaskPastItsDeadlineIsRefusedAndStaysWithTheCaller) {
  auto batcher = MakeBatcher({});
  std::unique_ptr<Task> task = MakeTask(1, TaskKind::kForward, now_);
  EXPECT_EQ(batcher->Schedule(task).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(task, nullptr);
  EXPECT_EQ(sinks_[0].calls, 0);
  EXPECT_EQ(Count(metrics_.rejections().deadline_exceeded), 1);
}

TEST_F(BatcherTest, CancelledTaskIsDroppedBeforeLaunch) {
  auto batcher = MakeBatcher({});
  Schedule(*batcher, MakeTask(1));
  Schedule(*batcher, MakeTask(2));
  sinks_[0].cancelled = true;
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{2}));
  ASSERT_TRUE(sinks_[0].result);
  EXPECT_EQ(sinks_[0].result->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Count(metrics_.rejections().cancelled), 1);
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
}

TEST_F(BatcherTest, FullQueueAnswersResourceExhaustedAtOnce) {
  BatcherOptions options;
  options.max_queue_size = 2;
  auto batcher = MakeBatcher(options);
  Schedule(*batcher, MakeTask(1));
  Schedule(*batcher, MakeTask(1));
  std::unique_ptr<Task> third = MakeTask(1);
  const absl::Status status = batcher->Schedule(third);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("--max_queue_size"), absl::string_view::npos) << status;
  EXPECT_NE(third, nullptr);  // still the caller's
  EXPECT_EQ(Count(metrics_.rejections().queue_full), 1);
  EXPECT_EQ(batcher->pending_requests(), 2);
  EXPECT_EQ(metrics_.device(0).pending_requests->Value(), 2);
  EXPECT_EQ(metrics_.device(0).pending_rows->Value(), 2);
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(metrics_.device(0).pending_requests->Value(), 0);
  EXPECT_TRUE(batcher->Schedule(third).ok());  // room again
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
}

TEST_F(BatcherTest, ByteBudgetIsSharedAndReleasedOnFinish) {
  MemoryBudget budget(100);  // a task of n rows holds 32 n bytes
  auto a = MakeBatcher({}, &budget);
  auto b = MakeBatcher({}, &budget);
  Schedule(*a, MakeTask(2));  // 64
  std::unique_ptr<Task> task = MakeTask(2);
  EXPECT_EQ(b->Schedule(task).code(), absl::StatusCode::kResourceExhausted);
  std::optional<Batch> batch = a->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(budget.used(), 64);
  a->Finish(std::move(batch->tasks[0]), absl::OkStatus());
  EXPECT_EQ(budget.used(), 0);
  EXPECT_TRUE(b->Schedule(task).ok());
  EXPECT_EQ(budget.used(), 64);
}

TEST_F(BatcherTest, CloseRefusesNewTasksAndFlushesQueuedOnes) {
  BatcherOptions options;
  options.max_queue_delay = absl::Seconds(10);
  auto batcher = MakeBatcher(options);
  Schedule(*batcher, MakeTask(1));
  EXPECT_FALSE(batcher->TryTakeBatch());
  batcher->Close();
  std::unique_ptr<Task> late = MakeTask(1);
  EXPECT_EQ(batcher->Schedule(late).code(), absl::StatusCode::kUnavailable);
  std::optional<Batch> batch = batcher->WaitForBatch();  // ready at once: closed
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{1}));
  batcher->Finish(std::move(batch->tasks[0]), absl::OkStatus());
  EXPECT_FALSE(batcher->WaitForBatch());  // closed and empty: workers exit
}

TEST_F(BatcherTest, FlushLaunchesWithoutTheDelayButStillAccepts) {
  BatcherOptions options;
  options.max_queue_delay = absl::Seconds(10);
  auto batcher = MakeBatcher(options);
  Schedule(*batcher, MakeTask(1));
  EXPECT_FALSE(batcher->TryTakeBatch());
  batcher->Flush();
  Schedule(*batcher, MakeTask(2));
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(RowsOf(*batch), (std::vector<int64_t>{1, 2}));
  for (auto& task : batch->tasks) batcher->Finish(std::move(task), absl::OkStatus());
}

TEST_F(BatcherTest, DestructionAnswersQueuedTasksUnavailable) {
  {
    BatcherOptions options;
    options.max_queue_delay = absl::Seconds(10);
    auto batcher = MakeBatcher(options);
    Schedule(*batcher, MakeTask(1));
  }
  ASSERT_TRUE(sinks_[0].result);
  EXPECT_EQ(sinks_[0].result->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(budget_.used(), 0);
}

TEST_F(BatcherTest, RunBatchDeliversPerTaskStatusesAndRecordsTheBatch) {
  auto batcher = MakeBatcher({});
  FakeExecutor executor;
  executor.status_for_rows = [](int64_t rows) {
    return rows == 2 ? absl::InternalError("fault in task of 2 rows") : absl::OkStatus();
  };
  for (int64_t rows : {1, 2, 3}) Schedule(*batcher, MakeTask(rows));
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  const DeviceMetrics& m = metrics_.device(0);
  RunBatch(*batcher, executor, m, *std::move(batch), 0);
  ASSERT_EQ(executor.batches.size(), 1u);
  EXPECT_EQ(executor.batches[0], (std::vector<int64_t>{1, 2, 3}));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(sinks_[i].calls, 1);
  EXPECT_TRUE(sinks_[0].result->ok());
  EXPECT_EQ(sinks_[1].result->code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(sinks_[2].result->ok());
  EXPECT_EQ(Samples(m.batch_rows), 1u);
  EXPECT_EQ(Sum(m.batch_rows), 6);
  EXPECT_EQ(Sum(m.batch_requests), 3);
  EXPECT_EQ(Samples(m.batch_kernel_seconds), 1u);
  EXPECT_EQ(Samples(m.batch_h2d_seconds), 0u);  // the fake has no copies
  EXPECT_EQ(m.processed_bytes->Value(), 6 * 32);
  EXPECT_NEAR(Sum(m.kernel_bandwidth), 6 * 32 / 1e-3, 1e-6);
  EXPECT_EQ(m.batches_in_flight->Value(), 0);
  EXPECT_EQ(budget_.used(), 0);
}

TEST_F(BatcherTest, ReplyPoolFinishesEveryTaskOnceWithItsOwnStatus) {
  for (int threads : {0, 3}) {
    SCOPED_TRACE(threads);
    sinks_.clear();
    auto batcher = MakeBatcher({});
    ReplyPool pool(threads);
    for (int i = 0; i < 50; ++i) Schedule(*batcher, MakeTask(1 + i % 3));
    std::optional<Batch> batch = batcher->TryTakeBatch();
    ASSERT_TRUE(batch);
    ASSERT_EQ(batch->tasks.size(), 50u);
    std::vector<absl::Status> statuses;
    for (int i = 0; i < 50; ++i) {
      statuses.push_back(i % 7 == 3 ? absl::InternalError(std::to_string(i)) : absl::OkStatus());
    }
    pool.FinishAll(*batcher, std::move(batch->tasks), statuses);
    pool.Stop();  // whatever pool threads had taken is finished now
    for (int i = 0; i < 50; ++i) {
      ASSERT_EQ(sinks_[i].calls, 1) << i;
      EXPECT_EQ(*sinks_[i].result, statuses[i]) << i;
    }
    EXPECT_EQ(budget_.used(), 0);
  }
}

}  // namespace
}  // namespace normsvc::server
