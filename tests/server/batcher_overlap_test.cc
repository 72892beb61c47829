// BatcherOptions::overlap_min_bytes: while a batch runs, the next one closes
// only once enough input bytes are queued. First thread-free (a fake clock,
// TryTakeBatch and BatchDone), then through BatchWorker's threads with a
// two-slot fake executor whose batches run until the test lets them finish:
// small requests never run two batches at once, large ones do, and every
// task is answered exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "server/batch_worker.h"
#include "server/batcher.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "test_tasks.h"

namespace normsvc::server {
namespace {

using testing::MakeForwardTask;
using testing::RecordingSink;
using testing::WaitForBatchOnThread;

// MakeForwardTask: 16 input bytes a row.
constexpr int64_t kBytesPerRow = 16;

class BatcherOverlapTest : public ::testing::Test {
 protected:
  absl::Time now_ = absl::FromUnixSeconds(1000000);
  ServiceMetrics metrics_{{"cpu"}, BuildInfo{"test", "test", "none", "cpu"}};
  MemoryBudget budget_{int64_t{1} << 30};
  std::deque<RecordingSink> sinks_;

  std::unique_ptr<Batcher> MakeBatcher(BatcherOptions options) {
    return std::make_unique<Batcher>(options, &budget_, metrics_.device(0), metrics_.rejections(),
                                     [this] { return now_; });
  }
  void Schedule(Batcher& batcher, int64_t rows) {
    std::unique_ptr<Task> task = MakeForwardTask(rows, &sinks_.emplace_back());
    ASSERT_TRUE(batcher.Schedule(task).ok());
  }
  static int64_t RowsOf(const std::optional<Batch>& batch) { return batch ? batch->rows : -1; }
  // Schedules one row and takes it: a batch that runs until BatchDone.
  Batch TakeRunningBatch(Batcher& batcher) {
    Schedule(batcher, 1);
    std::optional<Batch> batch = batcher.TryTakeBatch();
    EXPECT_EQ(RowsOf(batch), 1);
    return batch ? *std::move(batch) : Batch{};
  }
  // A batcher on the real clock, for tests with waiting threads.
  std::unique_ptr<Batcher> MakeWaitingBatcher(int64_t overlap_min_rows) {
    BatcherOptions options;
    options.overlap_min_bytes = overlap_min_rows * kBytesPerRow;
    return std::make_unique<Batcher>(options, &budget_, metrics_.device(0), metrics_.rejections());
  }
  static void FinishAll(Batcher& batcher, Batch& batch) {
    for (auto& task : batch.tasks) batcher.Finish(std::move(task), absl::OkStatus());
  }
};

TEST_F(BatcherOverlapTest, SmallQueueWaitsForTheRunningBatchThenLeavesWhole) {
  BatcherOptions options;
  options.overlap_min_bytes = 10 * kBytesPerRow;
  auto batcher = MakeBatcher(options);

  Schedule(*batcher, 2);
  std::optional<Batch> first = batcher->TryTakeBatch();  // nothing runs: taken at once
  ASSERT_EQ(RowsOf(first), 2);

  for (int64_t rows : {3, 4}) Schedule(*batcher, rows);  // 7 rows < 10: held
  EXPECT_FALSE(batcher->TryTakeBatch());
  EXPECT_EQ(batcher->NextReadyTime(), absl::InfiniteFuture());

  batcher->BatchDone();  // the executor is free: the queue leaves as one batch
  EXPECT_EQ(batcher->NextReadyTime(), absl::InfinitePast());
  std::optional<Batch> second = batcher->TryTakeBatch();
  ASSERT_EQ(RowsOf(second), 7);
  EXPECT_EQ(second->tasks.size(), 2u);
  batcher->BatchDone();
  FinishAll(*batcher, *first);
  FinishAll(*batcher, *second);
}

TEST_F(BatcherOverlapTest, QueueReachingTheThresholdStartsASecondBatchBesideTheFirst) {
  BatcherOptions options;
  options.overlap_min_bytes = 10 * kBytesPerRow;
  auto batcher = MakeBatcher(options);

  std::optional<Batch> first = TakeRunningBatch(*batcher);
  Schedule(*batcher, 9);
  EXPECT_FALSE(batcher->TryTakeBatch());  // 9 rows: one short
  Schedule(*batcher, 1);
  std::optional<Batch> second = batcher->TryTakeBatch();  // 10 rows: exactly the threshold
  ASSERT_EQ(RowsOf(second), 10);

  // Two run now; a third needs the threshold as well.
  Schedule(*batcher, 5);
  EXPECT_FALSE(batcher->TryTakeBatch());
  batcher->BatchDone();
  EXPECT_FALSE(batcher->TryTakeBatch());  // one still runs
  batcher->BatchDone();
  std::optional<Batch> third = batcher->TryTakeBatch();
  ASSERT_EQ(RowsOf(third), 5);
  batcher->BatchDone();
  for (auto* batch : {&first, &second, &third}) FinishAll(*batcher, **batch);
}

TEST_F(BatcherOverlapTest, ZeroThresholdTakesASecondBatchAtOnce) {
  auto batcher = MakeBatcher({});  // overlap_min_bytes = 0
  Schedule(*batcher, 1);
  std::optional<Batch> first = batcher->TryTakeBatch();
  Schedule(*batcher, 1);
  std::optional<Batch> second = batcher->TryTakeBatch();
  ASSERT_EQ(RowsOf(first), 1);
  ASSERT_EQ(RowsOf(second), 1);
  batcher->BatchDone();
  batcher->BatchDone();
  FinishAll(*batcher, *first);
  FinishAll(*batcher, *second);
}

TEST_F(BatcherOverlapTest, DelayDoesNotReleaseAHeldBatchButFlushDoes) {
  BatcherOptions options;
  options.overlap_min_bytes = 100 * kBytesPerRow;
  options.max_queue_delay = absl::Microseconds(50);
  auto batcher = MakeBatcher(options);

  Schedule(*batcher, 1);
  now_ += absl::Microseconds(50);
  std::optional<Batch> first = batcher->TryTakeBatch();
  ASSERT_EQ(RowsOf(first), 1);

  Schedule(*batcher, 2);
  now_ += absl::Milliseconds(1);  // far past the delay: still held while the first runs
  EXPECT_FALSE(batcher->TryTakeBatch());
  EXPECT_EQ(batcher->NextReadyTime(), absl::InfiniteFuture());

  batcher->Flush();  // the drain launches whatever is queued at once
  std::optional<Batch> second = batcher->TryTakeBatch();
  ASSERT_EQ(RowsOf(second), 2);
  batcher->BatchDone();
  batcher->BatchDone();
  FinishAll(*batcher, *first);
  FinishAll(*batcher, *second);
}

TEST_F(BatcherOverlapTest, TaskExpiringWhileHeldIsAnsweredBeforeLaunch) {
  BatcherOptions options;
  options.overlap_min_bytes = 100 * kBytesPerRow;
  auto batcher = MakeBatcher(options);
  std::optional<Batch> first = TakeRunningBatch(*batcher);

  std::unique_ptr<Task> expiring = MakeForwardTask(2, &sinks_.emplace_back());
  RecordingSink& expiring_sink = sinks_.back();
  expiring->deadline = now_ + absl::Microseconds(10);
  ASSERT_TRUE(batcher->Schedule(expiring).ok());
  Schedule(*batcher, 3);
  now_ += absl::Microseconds(20);
  EXPECT_FALSE(batcher->TryTakeBatch());  // held; the expired head is answered now
  EXPECT_EQ(expiring_sink.calls, 1);
  EXPECT_EQ(expiring_sink.code(), absl::StatusCode::kDeadlineExceeded);

  batcher->BatchDone();
  std::optional<Batch> second = batcher->TryTakeBatch();
  ASSERT_EQ(RowsOf(second), 3);
  batcher->BatchDone();
  FinishAll(*batcher, *first);
  FinishAll(*batcher, *second);
  EXPECT_EQ(expiring_sink.calls, 1);
}

TEST_F(BatcherOverlapTest, BatchDoneWakesAWorkerHeldBehindTheRunningBatch) {
  std::unique_ptr<Batcher> held = MakeWaitingBatcher(100);
  Batcher& batcher = *held;
  std::optional<Batch> first = TakeRunningBatch(batcher);
  Schedule(batcher, 2);
  std::future<int64_t> waiter = WaitForBatchOnThread(batcher);
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  batcher.BatchDone();  // nothing else happens: this alone must wake it
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiter.get(), 2);
  batcher.BatchDone();
  FinishAll(batcher, *first);
}

TEST_F(BatcherOverlapTest, WhatStaysReadyAfterATakeWakesTheNextWaiter) {
  // Held behind a running batch: a backward task (always alone) and then a
  // forward task that brings the queue to the threshold. The one Schedule
  // that made the queue ready wakes one waiter, which takes the backward
  // task; the other must be woken for the forward one.
  std::unique_ptr<Batcher> held = MakeWaitingBatcher(100);
  Batcher& batcher = *held;
  std::optional<Batch> first = TakeRunningBatch(batcher);
  std::unique_ptr<Task> backward = MakeForwardTask(3, &sinks_.emplace_back());
  backward->kind = TaskKind::kBackward;
  ASSERT_TRUE(batcher.Schedule(backward).ok());
  std::future<int64_t> a = WaitForBatchOnThread(batcher);
  std::future<int64_t> b = WaitForBatchOnThread(batcher);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both asleep, held
  EXPECT_EQ(a.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  EXPECT_EQ(b.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  Schedule(batcher, 100);
  ASSERT_EQ(a.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  ASSERT_EQ(b.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const int64_t rows_a = a.get();
  const int64_t rows_b = b.get();
  EXPECT_EQ(std::min(rows_a, rows_b), 3);
  EXPECT_EQ(std::max(rows_a, rows_b), 100);
  for (int i = 0; i < 3; ++i) batcher.BatchDone();
  FinishAll(batcher, *first);
}

// Two slots; each Run blocks until the test releases it, and records how
// many ran at once. (std::mutex, not absl::Mutex::Await: the TSan build
// annotates absl::Mutex's Lock/Unlock and CondVar waits only.)
class GatedExecutor final : public Executor {
 public:
  GatedExecutor() { device_.label = "cpu"; }
  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return 2; }
  int64_t max_batch_staging_bytes() const override { return 0; }
  BatchResult Run(const Batch& batch, int) override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++running_;
    const int64_t ticket = ++started_;
    most_at_once_ = std::max(most_at_once_, running_);
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_ >= ticket; });
    --running_;
    BatchResult result;
    result.statuses.assign(batch.tasks.size(), absl::OkStatus());
    return result;
  }
  absl::StatusOr<DeviceBuffer> Upload(const void*, std::size_t) override {
    return absl::UnimplementedError("gated");
  }
  bool healthy() const override { return true; }

  // Lets every batch started so far, and the next `more`, finish.
  void ReleaseAll(int64_t more = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = started_ + more;
    changed_.notify_all();
  }
  // Waits until `count` batches have started (at most 5 s); false if not.
  bool AwaitStarted(int64_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(5), [&] { return started_ >= count; });
  }
  int64_t started() {
    std::lock_guard<std::mutex> lock(mutex_);
    return started_;
  }
  int64_t most_at_once() {
    std::lock_guard<std::mutex> lock(mutex_);
    return most_at_once_;
  }

 private:
  DeviceDescription device_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t running_ = 0, started_ = 0, released_ = 0, most_at_once_ = 0;  // under mutex_
};

class BatchWorkerOverlapTest : public BatcherOverlapTest {
 protected:
  // Schedules `tasks` tasks of `rows` rows while the first batch is held on
  // the device, waits for `expected` batches to run at once (a second one
  // that should not start gets 100 ms to show up), then lets every batch
  // finish; returns the most batches that ran at once, and checks every
  // task was answered OK exactly once.
  int64_t MostAtOnce(int64_t overlap_min_rows, int64_t rows, int tasks, int64_t expected) {
    BatcherOptions options;
    options.overlap_min_bytes = overlap_min_rows * kBytesPerRow;
    std::deque<RecordingSink> sinks;  // outlives the batcher and the worker
    Batcher batcher(options, &budget_, metrics_.device(0), metrics_.rejections());
    GatedExecutor executor;
    BatchWorker worker(batcher, executor, metrics_.device(0), nullptr);
    worker.Start();
    auto schedule = [&] {
      std::unique_ptr<Task> task = MakeForwardTask(rows, &sinks.emplace_back());
      EXPECT_TRUE(batcher.Schedule(task).ok());
    };
    schedule();
    EXPECT_TRUE(executor.AwaitStarted(1));
    for (int i = 1; i < tasks; ++i) schedule();
    EXPECT_TRUE(executor.AwaitStarted(expected));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int64_t started_while_first_ran = executor.started();
    executor.ReleaseAll(tasks);
    // Every task taken before Close, which would start a held batch at once.
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (batcher.pending_requests() > 0 && absl::Now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(batcher.pending_requests(), 0);
    batcher.Close();
    worker.Join();
    for (const RecordingSink& sink : sinks) {
      EXPECT_EQ(sink.calls, 1);
      EXPECT_EQ(sink.code(), absl::StatusCode::kOk);
    }
    EXPECT_EQ(batcher.pending_requests(), 0);
    EXPECT_EQ(executor.most_at_once(), started_while_first_ran);
    return executor.most_at_once();
  }
};

TEST_F(BatchWorkerOverlapTest, SmallRequestsRunOneBatchAtATime) {
  EXPECT_EQ(MostAtOnce(/*overlap_min_rows=*/64, /*rows=*/1, /*tasks=*/20, /*expected=*/1), 1);
}

TEST_F(BatchWorkerOverlapTest, LargeRequestsOverlapOnBothSlots) {
  EXPECT_EQ(MostAtOnce(/*overlap_min_rows=*/64, /*rows=*/64, /*tasks=*/3, /*expected=*/2), 2);
}

TEST_F(BatchWorkerOverlapTest, ZeroThresholdOverlapsEvenOneRowRequests) {
  EXPECT_EQ(MostAtOnce(/*overlap_min_rows=*/0, /*rows=*/1, /*tasks=*/3, /*expected=*/2), 2);
}

}  // namespace
}  // namespace normsvc::server
