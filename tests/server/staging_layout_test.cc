// Where a batch's tensors go in the staging buffer: aligned, inputs before
// outputs, no overlap, and a batch's footprint the sum of its tasks'.
#include "server/staging_layout.h"

#include <algorithm>
#include <utility>

#include <gtest/gtest.h>

namespace normsvc::server {
namespace {

// Host pointers only matter as present/absent here.
char kSomewhere[1];

Task ForwardTask(int64_t rows, int64_t hidden, kernels::DType dtype, bool residual, bool stats,
                 bool params) {
  Task task;
  task.kind = TaskKind::kForward;
  task.rows = rows;
  task.hidden = hidden;
  kernels::ForwardSegment& f = task.forward;
  f.rows = rows;
  f.hidden = hidden;
  f.x_dtype = dtype;
  f.out_dtype = kernels::DType::kF32;
  f.x = kSomewhere;
  f.out = kSomewhere;
  if (residual) f.residual = f.residual_out = kSomewhere;
  if (stats) f.mean = f.rstd = reinterpret_cast<float*>(kSomewhere);
  if (params) f.gamma = f.beta = kSomewhere;
  return task;
}

Task BackwardTask(int64_t rows, int64_t hidden) {
  Task task;
  task.kind = TaskKind::kBackward;
  task.rows = rows;
  task.hidden = hidden;
  kernels::BackwardArgs& b = task.backward;
  b.rows = rows;
  b.hidden = hidden;
  b.x_dtype = kernels::DType::kBF16;
  b.x = b.dy = b.dx = kSomewhere;
  b.gamma = kSomewhere;
  b.mean = b.rstd = reinterpret_cast<const float*>(kSomewhere);
  b.dgamma = b.dbeta = reinterpret_cast<float*>(kSomewhere);
  return task;
}

TEST(StagingLayoutTest, TensorsAreAlignedDisjointAndInputsComeFirst) {
  std::vector<Task> tasks;
  tasks.push_back(ForwardTask(3, 100, kernels::DType::kF16, true, true, true));
  tasks.push_back(ForwardTask(1, 4096, kernels::DType::kF32, false, false, false));
  tasks.push_back(ForwardTask(7, 3, kernels::DType::kBF16, true, false, true));
  std::vector<TaskSlice> slices;
  int64_t footprint = 0;
  for (const Task& task : tasks) {
    slices.push_back({&task, 0, task.rows});
    footprint += TaskStagingBytes(task);
  }
  const StagingPlan plan = PlanStaging(slices);
  EXPECT_EQ(plan.total_bytes, footprint);

  std::vector<std::pair<int64_t, int64_t>> inputs, outputs;  // [begin, end)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    const StagingOffsets& o = plan.slices[i];
    const int64_t xs = static_cast<int64_t>(kernels::DTypeSize(t.forward.x_dtype));
    const int64_t elements = t.rows * t.hidden;
    inputs.push_back({o.x, o.x + elements * xs});
    if (t.forward.residual) inputs.push_back({o.residual, o.residual + elements * xs});
    if (t.forward.gamma) inputs.push_back({o.gamma, o.gamma + t.hidden * 4});
    if (t.forward.beta) inputs.push_back({o.beta, o.beta + t.hidden * 4});
    outputs.push_back({o.out, o.out + elements * 4});
    if (t.forward.residual_out) outputs.push_back({o.residual_out, o.residual_out + elements * xs});
    if (t.forward.mean) outputs.push_back({o.mean, o.mean + t.rows * 4});
    if (t.forward.rstd) outputs.push_back({o.rstd, o.rstd + t.rows * 4});
    EXPECT_EQ(t.forward.residual != nullptr, o.residual >= 0);
    EXPECT_EQ(t.forward.mean != nullptr, o.mean >= 0);
  }
  for (const auto& [begin, end] : inputs) {
    EXPECT_EQ(begin % kStagingAlignment, 0);
    EXPECT_LE(end, plan.input_bytes);
  }
  for (const auto& [begin, end] : outputs) {
    EXPECT_EQ(begin % kStagingAlignment, 0);
    EXPECT_GE(begin, plan.input_bytes);
    EXPECT_LE(end, plan.total_bytes);
  }
  std::vector<std::pair<int64_t, int64_t>> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].second, all[i].first) << i;
}

TEST(StagingLayoutTest, BackwardSlicesCarryStatisticsAndGradients) {
  const Task task = BackwardTask(10, 64);
  const TaskSlice slice{&task, 4, 6};
  const StagingPlan plan = PlanStaging(std::span(&slice, 1));
  const StagingOffsets& o = plan.slices[0];
  EXPECT_EQ(o.x, 0);
  EXPECT_EQ(o.dy, AlignStaging(6 * 64 * 2));
  EXPECT_GE(o.saved_mean, 0);
  EXPECT_GE(o.saved_rstd, 0);
  EXPECT_GE(o.dgamma, plan.input_bytes);
  EXPECT_GE(o.dbeta, plan.input_bytes);
  EXPECT_EQ(plan.total_bytes, SliceStagingBytes(task, 6));
}

TEST(StagingLayoutTest, MaxRowsInStagingIsTheLargestSliceThatFits) {
  const Task task = ForwardTask(1000, 4096, kernels::DType::kF32, true, true, true);
  for (int64_t capacity : {int64_t{1} << 20, int64_t{3} << 20, int64_t{100} << 20}) {
    const int64_t rows = MaxRowsInStaging(task, capacity);
    EXPECT_LE(SliceStagingBytes(task, rows), capacity);
    if (rows < task.rows) {
      EXPECT_GT(SliceStagingBytes(task, rows + 1), capacity);
    }
  }
  EXPECT_EQ(MaxRowsInStaging(task, int64_t{1} << 30), 1000);
  EXPECT_EQ(MaxRowsInStaging(task, 1024), 0);  // not even one row
}

// The bound the server checks --staging_buffer_bytes against at start: every
// one-row request of that H fits in it, and the fp32 forward with everything
// is its exact size (six H-element tensors and two statistics, aligned).
TEST(StagingLayoutTest, LargestRowStagingBytesHoldsEveryOneRowRequest) {
  for (int64_t hidden : {int64_t{1}, int64_t{4097}, int64_t{262144}}) {
    const int64_t largest = LargestRowStagingBytes(hidden);
    EXPECT_EQ(largest, 6 * AlignStaging(hidden * 4) + 2 * AlignStaging(4)) << hidden;
    for (bool residual : {false, true}) {
      for (bool stats : {false, true}) {
        for (bool params : {false, true}) {
          for (kernels::DType dtype : {kernels::DType::kF32, kernels::DType::kBF16}) {
            const Task task = ForwardTask(1, hidden, dtype, residual, stats, params);
            EXPECT_LE(SliceStagingBytes(task, 1), largest) << hidden;
          }
        }
      }
    }
    EXPECT_LE(SliceStagingBytes(BackwardTask(1, hidden), 1), largest) << hidden;
    const Task everything = ForwardTask(1, hidden, kernels::DType::kF32, true, true, true);
    EXPECT_EQ(MaxRowsInStaging(everything, largest), 1);
    EXPECT_EQ(MaxRowsInStaging(everything, largest - 1), 0);
  }
}

}  // namespace
}  // namespace normsvc::server
