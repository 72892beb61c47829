// ModelStatistics from known instants: the split of a request's time into
// queue and compute, executions counted once per batch, per-batch-size
// entries; and the batch worker handing each task how its batch ran
// (BatchExecution), which the statistics are computed from. No server.
#include "server/kserve_statistics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server/batch_worker.h"
#include "server/batcher.h"
#include "server/metrics.h"

namespace normsvc::server {
namespace {

const absl::Time kT0 = absl::FromUnixMicros(1'700'000'000'000'000);
absl::Time At(int64_t us) { return kT0 + absl::Microseconds(us); }

BatchExecution Execution(uint64_t id, int64_t rows, int64_t start_us, int64_t end_us,
                         std::optional<double> h2d_us = std::nullopt,
                         std::optional<double> d2h_us = std::nullopt) {
  BatchExecution e;
  e.id = id;
  e.rows = rows;
  e.tasks = 1;
  e.started_at = At(start_us);
  e.finished_at = At(end_us);
  if (h2d_us) e.h2d_seconds = *h2d_us * 1e-6;
  if (d2h_us) e.d2h_seconds = *d2h_us * 1e-6;
  e.kernel_seconds = 1e-6;
  return e;
}

// A successful request received at `received_us` that ran in `execution`:
// accepted 10 us later, completed 10 us after the run, replied 5 us later.
KserveInferTiming Ran(int64_t rows, int64_t received_us, const BatchExecution& execution) {
  KserveInferTiming t;
  t.ok = true;
  t.rows = rows;
  t.received = At(received_us);
  t.accepted = At(received_us + 10);
  t.execution = execution;
  t.completed = execution.finished_at + absl::Microseconds(10);
  t.replied = t.completed + absl::Microseconds(5);
  return t;
}

const KserveStatistics::ModelExists kEveryModelExists = [](const std::string&) { return true; };

inference::ModelStatistics Fill(const KserveStatistics& stats, const std::string& model) {
  inference::ModelStatistics out;
  stats.Fill(model, &out);
  return out;
}

TEST(KserveStatisticsTest, SplitsOneRequestIntoDisjointQueueAndComputeIntervals) {
  KserveStatistics stats;
  // Run 40..140 us with a 20 us upload and a 30 us download: 50 us of kernels.
  stats.Record("layernorm", Ran(3, 0, Execution(7, 3, 40, 140, 20, 30)), kEveryModelExists);
  const auto out = Fill(stats, "layernorm");
  const auto& s = out.inference_stats();
  EXPECT_EQ(out.inference_count(), 3u);
  EXPECT_EQ(out.execution_count(), 1u);
  EXPECT_EQ(out.last_inference(), static_cast<uint64_t>(absl::ToUnixMillis(At(155))));
  EXPECT_EQ(s.success().count(), 1u);
  EXPECT_EQ(s.success().ns(), 155'000u);        // received -> replied
  EXPECT_EQ(s.queue().ns(), 30'000u);           // accepted (10) -> run started (40)
  EXPECT_EQ(s.compute_input().ns(), 30'000u);   // handler 10 + upload 20
  EXPECT_EQ(s.compute_infer().ns(), 50'000u);   // run 100 - 20 - 30
  EXPECT_EQ(s.compute_output().ns(), 35'000u);  // download 30 + reply 5
  for (const auto* d : {&s.queue(), &s.compute_input(), &s.compute_infer(), &s.compute_output()}) {
    EXPECT_EQ(d->count(), 1u);
  }
  // The 10 us hand-off from the run's end to the completion is overhead.
  EXPECT_EQ(s.success().ns() - (s.queue().ns() + s.compute_input().ns() + s.compute_infer().ns() +
                                s.compute_output().ns()),
            10'000u);
  EXPECT_EQ(s.fail().count(), 0u);
  ASSERT_EQ(out.batch_stats_size(), 1);
  EXPECT_EQ(out.batch_stats(0).batch_size(), 3u);
  EXPECT_EQ(out.batch_stats(0).compute_input().ns(), 20'000u);
  EXPECT_EQ(out.batch_stats(0).compute_infer().ns(), 50'000u);
  EXPECT_EQ(out.batch_stats(0).compute_output().ns(), 30'000u);
}

// A batch whose stages were not timed (the GPU executor times one in
// --timed_batch_interval) is split in the shares of the model's last timed
// batch; before any timed batch its whole run counts as compute.
TEST(KserveStatisticsTest, UntimedBatchesSplitInTheSharesOfTheLastTimedOne) {
  KserveStatistics stats;
  BatchExecution untimed_first = Execution(1, 2, 100, 200);
  untimed_first.stages_untimed = true;
  untimed_first.kernel_seconds.reset();
  stats.Record("layernorm", Ran(2, 90, untimed_first), kEveryModelExists);
  // Timed: run 100 us, upload 20 (0.2), download 30 (0.3).
  stats.Record("layernorm", Ran(2, 290, Execution(2, 2, 300, 400, 20, 30)), kEveryModelExists);
  // Untimed, run 60 us: 12 us upload, 18 us download, 30 us compute.
  BatchExecution untimed = Execution(3, 2, 500, 560);
  untimed.stages_untimed = true;
  untimed.kernel_seconds.reset();
  stats.Record("layernorm", Ran(2, 490, untimed), kEveryModelExists);

  const auto out = Fill(stats, "layernorm");
  const auto& s = out.inference_stats();
  EXPECT_EQ(out.execution_count(), 3u);
  // Handler 10 us each; uploads 0 + 20 + 12.
  EXPECT_EQ(s.compute_input().ns(), 30'000u + 32'000u);
  // Runs 100 + 50 + 30.
  EXPECT_EQ(s.compute_infer().ns(), 180'000u);
  // Replies 5 us each; downloads 0 + 30 + 18.
  EXPECT_EQ(s.compute_output().ns(), 15'000u + 48'000u);
  ASSERT_EQ(out.batch_stats_size(), 1);
  EXPECT_EQ(out.batch_stats(0).compute_input().ns(), 32'000u);
  EXPECT_EQ(out.batch_stats(0).compute_output().ns(), 48'000u);
}

TEST(KserveStatisticsTest, ExecutionsCountOncePerBatchAndBatchStatsKeyOnTheLaunchRows) {
  KserveStatistics stats;
  // Batch 1: two layernorm requests (2 + 4 rows) and one rmsnorm request
  // (2 rows) in one 8-row launch, no copies (the CPU executor), run 100 us.
  const BatchExecution b1 = Execution(1, 8, 100, 200);
  stats.Record("layernorm", Ran(2, 0, b1), kEveryModelExists);
  stats.Record("rmsnorm", Ran(2, 20, b1), kEveryModelExists);
  stats.Record("layernorm", Ran(4, 50, b1), kEveryModelExists);
  // Batch 2: one layernorm request alone (4 rows), run 60 us; batch 3: the
  // same size again, 40 us.
  stats.Record("layernorm", Ran(4, 300, Execution(2, 4, 320, 380)), kEveryModelExists);
  stats.Record("layernorm", Ran(4, 400, Execution(3, 4, 410, 450)), kEveryModelExists);
  // A failure and an empty request: neither runs anything.
  KserveInferTiming failed;
  failed.received = At(500);
  failed.replied = At(507);
  stats.Record("layernorm", failed, kEveryModelExists);
  KserveInferTiming empty;
  empty.ok = true;
  empty.received = At(600);
  empty.accepted = At(603);
  empty.completed = At(603);
  empty.replied = At(604);
  stats.Record("layernorm", empty, kEveryModelExists);

  const auto ln = Fill(stats, "layernorm");
  EXPECT_EQ(ln.inference_count(), 2u + 4u + 4u + 4u);
  EXPECT_EQ(ln.execution_count(), 3u);
  const auto& s = ln.inference_stats();
  EXPECT_EQ(s.success().count(), 5u);
  EXPECT_EQ(s.fail().count(), 1u);
  EXPECT_EQ(s.fail().ns(), 7'000u);
  for (const auto* d : {&s.queue(), &s.compute_input(), &s.compute_infer(), &s.compute_output()}) {
    EXPECT_EQ(d->count(), 5u);
  }
  // Queue: 100-10, 100-60, 320-310, 410-410; the empty request waits 0.
  EXPECT_EQ(s.queue().ns(), (90u + 40u + 10u + 0u + 0u) * 1000);
  // Each request is charged its whole batch's run.
  EXPECT_EQ(s.compute_infer().ns(), (100u + 100u + 60u + 40u + 0u) * 1000);
  EXPECT_EQ(s.compute_input().ns(), (10u * 4 + 3u) * 1000);  // handlers only: no copies
  EXPECT_EQ(s.compute_output().ns(), (5u * 4 + 1u) * 1000);  // reply assembly
  ASSERT_EQ(ln.batch_stats_size(), 2);
  EXPECT_EQ(ln.batch_stats(0).batch_size(), 4u);
  EXPECT_EQ(ln.batch_stats(0).compute_infer().count(), 2u);
  EXPECT_EQ(ln.batch_stats(0).compute_infer().ns(), 100'000u);
  EXPECT_EQ(ln.batch_stats(0).compute_input().count(), 2u);
  EXPECT_EQ(ln.batch_stats(0).compute_input().ns(), 0u);
  EXPECT_EQ(ln.batch_stats(1).batch_size(), 8u);
  EXPECT_EQ(ln.batch_stats(1).compute_infer().count(), 1u);
  EXPECT_EQ(ln.batch_stats(1).compute_infer().ns(), 100'000u);

  // The shared launch is an execution of rmsnorm's too.
  const auto rms = Fill(stats, "rmsnorm");
  EXPECT_EQ(rms.execution_count(), 1u);
  EXPECT_EQ(rms.inference_count(), 2u);
  ASSERT_EQ(rms.batch_stats_size(), 1);
  EXPECT_EQ(rms.batch_stats(0).batch_size(), 8u);

  const auto none = Fill(stats, "layernorm.unused");
  EXPECT_EQ(none.name(), "layernorm.unused");
  EXPECT_EQ(none.version(), "1");
  EXPECT_EQ(none.inference_count(), 0u);
  EXPECT_EQ(none.batch_stats_size(), 0);
}

TEST(KserveStatisticsTest, StageTimingsAreClippedToTheRunAndClockStepsCountAsZero) {
  KserveStatistics stats;
  // A 10 us run whose copies claim 8 + 5 us: the download gets what is left.
  stats.Record("rmsnorm", Ran(1, 0, Execution(1, 1, 20, 30, 8, 5)), kEveryModelExists);
  // A wall clock that stepped back: the run "started" before acceptance.
  KserveInferTiming stepped = Ran(1, 100, Execution(2, 1, 105, 150));
  stats.Record("rmsnorm", stepped, kEveryModelExists);
  const auto s = Fill(stats, "rmsnorm").inference_stats();
  EXPECT_EQ(s.compute_input().ns(), (10u + 8u + 10u) * 1000);
  EXPECT_EQ(s.compute_infer().ns(), (0u + 45u) * 1000);
  EXPECT_EQ(s.compute_output().ns(), (2u + 5u + 5u) * 1000);
  EXPECT_EQ(s.queue().ns(), 10'000u);  // 20 - 10, then 0 for 105 - 110
  EXPECT_EQ(s.queue().count(), 2u);
}

TEST(KserveStatisticsTest, AnExecutionSeenAgainAfterManyOthersIsStillCountedOnce) {
  KserveStatistics stats;
  // 100 batches of two requests each, the second requests arriving only
  // after every first one (replies of concurrent batches interleave).
  for (uint64_t id = 1; id <= 100; ++id) {
    stats.Record("layernorm", Ran(1, 0, Execution(id, 2, 20, 30)), kEveryModelExists);
  }
  for (uint64_t id = 1; id <= 100; ++id) {
    stats.Record("layernorm", Ran(1, 0, Execution(id, 2, 20, 30)), kEveryModelExists);
  }
  const auto out = Fill(stats, "layernorm");
  EXPECT_EQ(out.execution_count(), 100u);
  EXPECT_EQ(out.inference_stats().success().count(), 200u);
  ASSERT_EQ(out.batch_stats_size(), 1);
  EXPECT_EQ(out.batch_stats(0).compute_infer().count(), 100u);
}

// A client that registers a set, infers on it and deletes it, under a new
// name each time: the entries of deleted sets are dropped as new ones come,
// so the map stays within about twice the live models, and the live
// models' figures survive every sweep.
TEST(KserveStatisticsTest, EntriesOfModelsThatAreGoneAreDroppedAsNewOnesCome) {
  KserveStatistics stats;
  std::set<std::string> live = {"layernorm"};
  const KserveStatistics::ModelExists exists = [&live](const std::string& name) {
    return live.count(name) > 0;
  };
  stats.Record("layernorm", Ran(1, 0, Execution(1, 1, 20, 30)), exists);
  size_t most = 0;
  for (int job = 0; job < 5000; ++job) {
    const std::string model = "layernorm.job-" + std::to_string(job);
    live.insert(model);
    stats.Record(model, Ran(1, 0, Execution(2 + job, 1, 20, 30)), exists);
    live.erase(model);
    most = std::max(most, stats.ModelCount());
  }
  // The first sweep comes at 64 entries; after it, two live models (the
  // plain one and the job's) and a threshold of twice those.
  EXPECT_LE(most, 64u);
  EXPECT_LE(stats.ModelCount(), 64u);
  EXPECT_EQ(Fill(stats, "layernorm").inference_stats().success().count(), 1u);
  // An entry is never dropped while its model exists.
  for (int job = 0; job < 200; ++job) {
    const std::string model = "rmsnorm.kept-" + std::to_string(job);
    live.insert(model);
    stats.Record(model, Ran(1, 0, Execution(10'000 + job, 1, 20, 30)), exists);
  }
  for (int job = 0; job < 200; ++job) {
    const std::string model = "rmsnorm.kept-" + std::to_string(job);
    EXPECT_EQ(Fill(stats, model).inference_stats().success().count(), 1u) << model;
  }
  EXPECT_GE(stats.ModelCount(), 201u);
}

// ---- The batch worker's side: BatchExecution reaches every task's sink.

class ExecutionSink final : public TaskSink {
 public:
  bool IsCancelled() const override { return false; }
  void OnTaskExecuted(const BatchExecution& e) override {
    EXPECT_FALSE(done) << "OnTaskExecuted must come before OnTaskDone";
    execution = e;
    ++executed_calls;
  }
  void OnTaskDone(const absl::Status& status) override {
    done = true;
    result = status;
  }
  std::optional<BatchExecution> execution;
  int executed_calls = 0;
  bool done = false;
  absl::Status result;
};

// Sleeps a little (so the Run interval is measurable) and reports copies,
// or, `untimed`, that it skipped timing them.
class TimedExecutor final : public Executor {
 public:
  explicit TimedExecutor(bool untimed = false) : untimed_(untimed) { device_.label = "cpu"; }
  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return 1; }
  int64_t max_batch_staging_bytes() const override { return 0; }
  BatchResult Run(const Batch& batch, int) override {
    absl::SleepFor(absl::Milliseconds(2));
    BatchResult result;
    result.statuses.assign(batch.tasks.size(), absl::OkStatus());
    if (untimed_) {
      result.stages_untimed = true;
      return result;
    }
    result.h2d_seconds = 3e-4;
    result.kernel_seconds = 5e-4;
    result.d2h_seconds = 2e-4;
    return result;
  }
  absl::StatusOr<DeviceBuffer> Upload(const void*, std::size_t) override {
    return absl::UnimplementedError("not used");
  }
  bool healthy() const override { return true; }

 private:
  bool untimed_;
  DeviceDescription device_;
};

// Schedules a task of `rows` rows of 8 whose outcome goes to `sink`.
void ScheduleInto(Batcher& batcher, ExecutionSink& sink, int64_t rows) {
  auto task = std::make_unique<Task>();
  task->rows = rows;
  task->hidden = 8;
  task->sink = &sink;
  ASSERT_TRUE(batcher.Schedule(task).ok());
}

TEST(BatchExecutionTest, EveryTaskOfABatchLearnsTheSameRunBeforeItsCompletion) {
  ServiceMetrics metrics({"cpu"}, BuildInfo{});
  BatcherOptions options;
  options.max_queue_delay = absl::ZeroDuration();
  Batcher batcher(options, nullptr, metrics.device(0), metrics.rejections());
  TimedExecutor executor;
  std::vector<ExecutionSink> sinks(5);
  auto schedule = [&](ExecutionSink& sink, int64_t rows) { ScheduleInto(batcher, sink, rows); };
  for (int i = 0; i < 3; ++i) schedule(sinks[i], i + 1);
  std::optional<Batch> first = batcher.TryTakeBatch();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->tasks.size(), 3u);
  const absl::Time before = absl::Now();
  RunBatch(batcher, executor, metrics.device(0), *std::move(first), 0);
  const absl::Time after = absl::Now();
  schedule(sinks[3], 4);
  schedule(sinks[4], 5);
  std::optional<Batch> second = batcher.TryTakeBatch();
  ASSERT_TRUE(second.has_value());
  RunBatch(batcher, executor, metrics.device(0), *std::move(second), 0);

  for (const ExecutionSink& sink : sinks) {
    ASSERT_TRUE(sink.done);
    EXPECT_TRUE(sink.result.ok());
    ASSERT_EQ(sink.executed_calls, 1);
  }
  const BatchExecution& e = *sinks[0].execution;
  EXPECT_GE(e.started_at, before);
  EXPECT_LE(e.finished_at, after);
  EXPECT_GE(e.finished_at - e.started_at, absl::Milliseconds(2));
  EXPECT_EQ(e.rows, 1 + 2 + 3);
  EXPECT_EQ(e.tasks, 3);
  EXPECT_EQ(e.h2d_seconds, 3e-4);
  EXPECT_EQ(e.kernel_seconds, 5e-4);
  EXPECT_EQ(e.d2h_seconds, 2e-4);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(sinks[i].execution->id, e.id);
    EXPECT_EQ(sinks[i].execution->started_at, e.started_at);
  }
  const BatchExecution& e2 = *sinks[3].execution;
  EXPECT_NE(e2.id, e.id);
  EXPECT_EQ(sinks[4].execution->id, e2.id);
  EXPECT_EQ(e2.rows, 4 + 5);
  EXPECT_EQ(e2.tasks, 2);
  EXPECT_GE(e2.started_at, e.finished_at);
}

TEST(BatchExecutionTest, TasksDroppedBeforeLaunchCompleteWithoutAnExecution) {
  ServiceMetrics metrics({"cpu"}, BuildInfo{});
  std::vector<ExecutionSink> sinks(2);
  {
    Batcher batcher(BatcherOptions{}, nullptr, metrics.device(0), metrics.rejections());
    for (ExecutionSink& sink : sinks) {
      auto task = std::make_unique<Task>();
      task->rows = 1;
      task->sink = &sink;
      ASSERT_TRUE(batcher.Schedule(task).ok());
    }
  }  // the destructor finishes queued tasks with UNAVAILABLE
  for (const ExecutionSink& sink : sinks) {
    EXPECT_TRUE(sink.done);
    EXPECT_EQ(sink.result.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(sink.executed_calls, 0);
  }
}

// A batch the executor did not time reaches every task as untimed, with no
// stage figures (KserveStatistics then splits it by shares).
TEST(BatchExecutionTest, AnUntimedBatchReachesItsTasksAsUntimed) {
  ServiceMetrics metrics({"cpu"}, BuildInfo{});
  Batcher batcher(BatcherOptions{}, nullptr, metrics.device(0), metrics.rejections());
  TimedExecutor executor(/*untimed=*/true);
  std::vector<ExecutionSink> sinks(2);
  for (ExecutionSink& sink : sinks) ScheduleInto(batcher, sink, 2);
  std::optional<Batch> batch = batcher.TryTakeBatch();
  ASSERT_TRUE(batch.has_value());
  RunBatch(batcher, executor, metrics.device(0), *std::move(batch), 0);
  for (const ExecutionSink& sink : sinks) {
    ASSERT_TRUE(sink.done);
    ASSERT_TRUE(sink.execution.has_value());
    EXPECT_TRUE(sink.execution->stages_untimed);
    EXPECT_FALSE(sink.execution->h2d_seconds || sink.execution->kernel_seconds ||
                 sink.execution->d2h_seconds);
  }
  EXPECT_EQ(metrics.device(0).batch_kernel_seconds->Collect().histogram.sample_count, 0u);
  EXPECT_EQ(metrics.device(0).batch_rows->Collect().histogram.sample_count, 1u);
}

}  // namespace
}  // namespace normsvc::server
