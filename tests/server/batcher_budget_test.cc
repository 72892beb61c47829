// The byte budget's path through a task's life: held from Schedule to the
// sink's reply (TaskSink::HoldUntilReplied, MemoryReservation), and the
// queue's failure when its executor leaves service (Batcher::FailQueued).
// Driven without threads, as batcher_test.cc.
#include <gtest/gtest.h>

#include <deque>
#include <optional>

#include "server/batcher.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "test_tasks.h"

namespace normsvc::server {
namespace {

using testing::MakeForwardTask;
using testing::RecordingSink;

class BatcherBudgetTest : public ::testing::Test {
 protected:
  ServiceMetrics metrics_{{"cpu"}, BuildInfo{"test", "test", "none", "cpu"}};
  std::deque<RecordingSink> sinks_;

  std::unique_ptr<Batcher> MakeBatcher(BatcherOptions options, MemoryBudget* budget) {
    return std::make_unique<Batcher>(options, budget, metrics_.device(0), metrics_.rejections());
  }
  // A task of `rows` rows: 16 input and 16 output bytes a row.
  std::unique_ptr<Task> MakeTask(int64_t rows) {
    return MakeForwardTask(rows, &sinks_.emplace_back());
  }
  void Schedule(Batcher& batcher, std::unique_ptr<Task> task) {
    ASSERT_TRUE(batcher.Schedule(task).ok());
    ASSERT_EQ(task, nullptr);
  }
};

// A sink whose reply waits for its client keeps the task's bytes in the
// budget until it lets them go; the default sink gives them back at once.
TEST_F(BatcherBudgetTest, ASinkHoldingItsReplyKeepsItsBytesInTheBudget) {
  class HoldingSink final : public TaskSink {
   public:
    bool IsCancelled() const override { return false; }
    void HoldUntilReplied(MemoryReservation reservation) override { held = std::move(reservation); }
    void OnTaskDone(const absl::Status& status) override { done = status; }
    MemoryReservation held;
    std::optional<absl::Status> done;
  };
  MemoryBudget budget(100);  // a task of n rows holds 32 n bytes
  auto batcher = MakeBatcher({}, &budget);
  HoldingSink sink;
  std::unique_ptr<Task> task = MakeForwardTask(2, &sink);
  ASSERT_TRUE(batcher->Schedule(task).ok());
  std::optional<Batch> batch = batcher->TryTakeBatch();
  ASSERT_TRUE(batch);
  batcher->Finish(std::move(batch->tasks[0]), absl::OkStatus());
  ASSERT_TRUE(sink.done.has_value());
  EXPECT_EQ(sink.held.bytes(), 64);
  EXPECT_EQ(budget.used(), 64);  // the reply is not sent yet
  std::unique_ptr<Task> second = MakeTask(2);
  EXPECT_EQ(batcher->Schedule(second).code(), absl::StatusCode::kResourceExhausted);
  sink.held.ShrinkTo(16);  // the request's bytes are gone, the reply's stay
  EXPECT_EQ(budget.used(), 16);
  EXPECT_TRUE(batcher->Schedule(second).ok());
  EXPECT_EQ(budget.used(), 80);
  sink.held = MemoryReservation();  // sent
  EXPECT_EQ(budget.used(), 64);
}

// FailQueued (an executor taken out of service) answers every queued task
// with its status at once and releases their bytes; a batch already taken
// is not touched, and Close's refusal is the one Schedule gives after.
TEST_F(BatcherBudgetTest, FailQueuedAnswersEveryQueuedTaskAndLeavesTakenBatchesAlone) {
  MemoryBudget budget(1000);
  BatcherOptions options;
  options.max_batch_rows = 2;
  auto batcher = MakeBatcher(options, &budget);
  for (int64_t rows : {2, 1, 3}) Schedule(*batcher, MakeTask(rows));
  std::optional<Batch> taken = batcher->TryTakeBatch();  // the first task
  ASSERT_TRUE(taken);
  ASSERT_EQ(taken->tasks.size(), 1u);
  EXPECT_EQ(budget.used(), 32 * 6);
  batcher->Close(absl::UnavailableError("cuda:3 is out of service"));
  batcher->FailQueued(absl::UnavailableError("cuda:3 was taken out of service"));
  EXPECT_EQ(batcher->pending_requests(), 0);
  EXPECT_EQ(budget.used(), 32 * 2);  // the taken batch's task only
  ASSERT_EQ(sinks_.size(), 3u);
  EXPECT_EQ(sinks_[0].calls, 0);
  for (int i : {1, 2}) {
    EXPECT_EQ(sinks_[i].calls, 1) << i;
    EXPECT_EQ(sinks_[i].code(), absl::StatusCode::kUnavailable) << i;
    EXPECT_EQ(sinks_[i].result->message(), "cuda:3 was taken out of service") << i;
  }
  std::unique_ptr<Task> late = MakeTask(1);
  const absl::Status refused = batcher->Schedule(late);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(), "cuda:3 is out of service");
  EXPECT_TRUE(batcher->closed());
  batcher->Finish(std::move(taken->tasks[0]), absl::OkStatus());
  EXPECT_EQ(sinks_[0].calls, 1);
  EXPECT_EQ(budget.used(), 0);
  EXPECT_FALSE(batcher->WaitForBatch());  // closed and empty
}

TEST(MemoryReservationTest, ReleasesOnceWhateverPathItTakes) {
  MemoryBudget budget(1000);
  ASSERT_TRUE(budget.TryAcquire(300));
  {
    MemoryReservation a = MemoryReservation::Adopt(&budget, 300);
    a.ShrinkTo(500);  // cannot grow
    EXPECT_EQ(a.bytes(), 300);
    a.ShrinkTo(200);
    EXPECT_EQ(budget.used(), 200);
    MemoryReservation b = std::move(a);
    EXPECT_EQ(a.bytes(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(b.bytes(), 200);
    ASSERT_TRUE(budget.TryAcquire(100));
    MemoryReservation c = MemoryReservation::Adopt(&budget, 100);
    b = std::move(c);  // b's 200 go back, c's 100 move in
    EXPECT_EQ(budget.used(), 100);
  }
  EXPECT_EQ(budget.used(), 0);
  MemoryReservation none = MemoryReservation::Adopt(nullptr, 50);  // no budget: nothing held
  EXPECT_EQ(none.bytes(), 0);
}

}  // namespace
}  // namespace normsvc::server
