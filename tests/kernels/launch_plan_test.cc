// The launch plans (kernels/src/launch_plan.h) for every hidden size the API
// allows: each covers its row, uses a kernel shape that exists, and depends
// on nothing but (hidden, dtype). Pure C++: runs without a GPU.
#include "launch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace normsvc::kernels::detail {
namespace {

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

void ExpectValid(const KernelPlan& p, int64_t hidden, DType dtype, bool forward) {
  const std::string where = std::string(forward ? "forward " : "backward ") + DTypeName(dtype) +
                            " H=" + std::to_string(hidden);
  ASSERT_GE(p.Capacity(), hidden) << where;
  const int most_threads = p.layout == Layout::kStreamed       ? kStreamedThreads
                           : !forward && UsesStagedBackward(p) ? kBackwardStagedBlockThreads
                                                               : 512;
  ASSERT_LE(p.block_threads, most_threads) << where;
  if (p.layout == Layout::kStreamed) return;
  ASSERT_GE(p.cluster, 1) << where;
  ASSERT_LE(p.cluster, 8) << where;
  if (p.cluster == 1) {
    ASSERT_TRUE(IsPowerOfTwo(p.row_threads)) << where;
    ASSERT_EQ(p.row_threads * p.groups, p.block_threads) << where;
  } else {
    ASSERT_EQ(p.groups, 1) << where;
    ASSERT_EQ(p.row_threads, p.block_threads * p.cluster) << where;
  }
  if (p.layout == Layout::kVector) {
    ASSERT_EQ(p.width, VectorWidth(dtype)) << where;
    // Forward rows may end in a partial chunk; backward vector rows may not.
    if (!forward) {
      ASSERT_EQ(hidden % p.width, 0) << where;
    }
    if (forward) {
      // Three slots only for rows with a partial last chunk.
      ASSERT_TRUE(p.slots == 1 || p.slots == 2 || p.slots == 4 ||
                  (p.slots == 3 && hidden % p.width != 0))
          << where;
    } else {
      ASSERT_TRUE(p.slots == 1 || p.slots == 2 || (p.slots == 4 && p.width == 4)) << where;
    }
  } else {
    // Forward: only rows with a partial last chunk too long for the
    // realigning kernel.
    if (forward) {
      ASSERT_NE(hidden % VectorWidth(dtype), 0) << where;
      ASSERT_GT((hidden + VectorWidth(dtype) - 1) / VectorWidth(dtype), kRealignMaxChunks) << where;
    }
    ASSERT_EQ(p.width, 1) << where;
    if (forward) {
      ASSERT_EQ(p.slots, 16) << where;
    } else {
      ASSERT_TRUE(p.slots == 1 || p.slots == 8) << where;
    }
  }
  // A row never needs more slots than it has, and fills more than one block
  // only when it does not fit in one.
  const int64_t chunks = (hidden + p.width - 1) / p.width;
  ASSERT_LE((chunks + p.row_threads - 1) / p.row_threads, p.slots) << where;
  if (p.cluster > 1) {
    ASSERT_GT(chunks, static_cast<int64_t>(p.block_threads) * p.slots) << where;
  }
}

TEST(LaunchPlan, EveryHiddenSizeGetsAValidPlan) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t hidden = 1; hidden <= kMaxHidden; ++hidden) {
      ExpectValid(PlanForward(hidden, dtype), hidden, dtype, true);
      ExpectValid(PlanBackward(hidden, dtype), hidden, dtype, false);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(LaunchPlan, KnownShapes) {
  // bf16 H=4096: 512 chunks of 8, 4 per thread: 128 threads a row, 2 rows a block.
  const KernelPlan p = PlanForward(4096, DType::kBF16);
  EXPECT_EQ(p.layout, Layout::kVector);
  EXPECT_EQ(p.row_threads, 128);
  EXPECT_EQ(p.groups, 2);
  // H=2049: 257 chunks of 8, the last of one element; 128 threads a row,
  // three slots (the third used by one thread).
  const KernelPlan odd = PlanForward(2049, DType::kBF16);
  EXPECT_EQ(odd.layout, Layout::kVector);
  EXPECT_EQ(odd.width, 8);
  EXPECT_EQ(odd.slots, 3);
  EXPECT_EQ(odd.row_threads, 128);
  EXPECT_EQ(odd.groups, 2);
  // H=8191: 1024 chunks, 512 threads of 2.
  EXPECT_EQ(PlanForward(8191, DType::kBF16).slots, 2);
  EXPECT_EQ(PlanForward(8191, DType::kBF16).row_threads, 512);
  // H=5: one partial chunk, one thread a row.
  EXPECT_EQ(PlanForward(5, DType::kBF16).row_threads, 1);
  // Backward H=2049 stays strided, and so do forward rows with a partial
  // chunk past kRealignMaxChunks chunks (bf16 H = 12289: 1537 chunks).
  EXPECT_EQ(PlanBackward(2049, DType::kBF16).layout, Layout::kStrided);
  EXPECT_EQ(PlanForward(12289, DType::kBF16).layout, Layout::kStrided);
  EXPECT_EQ(PlanForward(12287, DType::kBF16).layout, Layout::kVector);
  // fp32 H=65536: a cluster of 8 blocks of 512.
  const KernelPlan big = PlanForward(65536, DType::kF32);
  EXPECT_EQ(big.cluster, 8);
  EXPECT_EQ(PlanForward(kMaxHidden, DType::kBF16).layout, Layout::kStreamed);
  // Backward bf16 H=4096: 512 chunks, 2 a thread: 256 threads a row, 3 rows
  // in a block of 768 (the staged kernel).
  const KernelPlan b = PlanBackward(4096, DType::kBF16);
  EXPECT_TRUE(UsesStagedBackward(b));
  EXPECT_EQ(b.row_threads, 256);
  EXPECT_EQ(b.groups, 3);
  EXPECT_EQ(b.block_threads, 768);
  EXPECT_FALSE(UsesStagedBackward(PlanBackward(2049, DType::kBF16)));
}

TEST(LaunchPlan, BackwardUnitsCoverEveryRowOnce) {
  for (int64_t rows : {1, 2, 3, 7, 100, 1000, 16384, 1 << 20}) {
    for (int64_t hidden : {1, 768, 4096, 65536, 262144}) {
      const BackwardUnits u = PlanBackwardUnits(rows, hidden, DType::kBF16);
      ASSERT_GE(u.units, 1);
      EXPECT_GE(u.units * u.rows_per_unit, rows);
      EXPECT_LT((u.units - 1) * u.rows_per_unit, rows);
      EXPECT_EQ(u.rows_per_unit % PlanBackward(hidden, DType::kBF16).groups, 0);
    }
  }
  EXPECT_EQ(PlanBackwardUnits(0, 4096, DType::kF32).units, 0);
}

// 16-bit rows: one wave of units, as many as the multiprocessors hold at
// once, so long rows do not pay extra waves and extra rows of partials.
TEST(LaunchPlan, BackwardUnitsFillOneWave) {
  // The H200's active clusters (cudaOccupancyMaxActiveClusters): below
  // 132 x blocks / cluster from four blocks a cluster on.
  EXPECT_EQ(ActiveClusters(1, 2), 264);
  EXPECT_EQ(ActiveClusters(2, 2), 132);
  EXPECT_EQ(ActiveClusters(4, 2), 62);
  EXPECT_EQ(ActiveClusters(8, 2), 30);
  EXPECT_EQ(ActiveClusters(8, 1), 15);
  // bf16 65536: clusters of 8 blocks of 512, two blocks a multiprocessor: 30
  // at once, so 29 units of 9 rows (not 32 of 8: a second wave of two).
  EXPECT_EQ(BackwardResidentBlocks(PlanBackward(65536, DType::kBF16), DType::kBF16), 2);
  EXPECT_EQ(PlanBackwardUnits(256, 65536, DType::kBF16).units, 29);
  EXPECT_EQ(PlanBackwardUnits(256, 65536, DType::kBF16).rows_per_unit, 9);
  // bf16 8192: one in-block block of 512 (80 registers) a multiprocessor.
  EXPECT_EQ(PlanBackwardUnits(2048, 8192, DType::kBF16).units, 128);
  // fp32 16384: clusters of 4, two blocks a multiprocessor: 62 at once.
  EXPECT_EQ(PlanBackwardUnits(1024, 16384, DType::kF32).units, 61);
  EXPECT_EQ(PlanBackwardUnits(1024, 16384, DType::kF32).rows_per_unit, 17);
  // fp32 65536: clusters of 8 of the register kernel, one block a
  // multiprocessor: 15 at once.
  EXPECT_EQ(PlanBackwardUnits(256, 65536, DType::kF32).units, 15);
  // bf16 4096: one block of 768 a multiprocessor, whole groups of 3 rows.
  EXPECT_EQ(PlanBackwardUnits(4096, 4096, DType::kBF16).units, 125);
  for (int64_t hidden : {1, 64, 768, 2049, 4096, 8192, 16384, 32768, 65536, 262144}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const KernelPlan plan = PlanBackward(hidden, dtype);
      const int64_t wave = ActiveClusters(plan.cluster, BackwardResidentBlocks(plan, dtype));
      EXPECT_LE(wave, kBackwardWaveUnits * BackwardResidentBlocks(plan, dtype) / plan.cluster);
      EXPECT_LE(PlanBackwardUnits(1 << 20, hidden, dtype).units, std::max<int64_t>(1, wave))
          << hidden;
    }
  }
}

TEST(LaunchPlan, ColumnReduceSlicesFollowTheUnitCount) {
  // Each slice adds at most four units; 32 slices at most.
  EXPECT_EQ(ColumnReduceSlices(1), 1);
  EXPECT_EQ(ColumnReduceSlices(4), 1);
  EXPECT_EQ(ColumnReduceSlices(5), 2);
  EXPECT_EQ(ColumnReduceSlices(15), 4);   // fp32 256 x 65536
  EXPECT_EQ(ColumnReduceSlices(29), 8);   // bf16 256 x 65536
  EXPECT_EQ(ColumnReduceSlices(61), 16);  // fp32 1024 x 16384
  EXPECT_EQ(ColumnReduceSlices(124), 31);
  EXPECT_EQ(ColumnReduceSlices(125), kColumnReduceMaxSlices);
  EXPECT_EQ(ColumnReduceSlices(528), kColumnReduceMaxSlices);
  // Every unit is added: slices x units a slice covers the unit count up to
  // 128 units; beyond, the slices loop (the kernel's outer loop).
  for (int64_t units = 1; units <= 128; ++units) {
    EXPECT_GE(int64_t{ColumnReduceSlices(units)} * kColumnReduceUnitsPerThread, units) << units;
  }
}

// The shapes of BackwardColumnReduction.UnitCountsAndColumnTails (in the GPU
// tests) reach the reduction paths its comments name.
TEST(LaunchPlan, ColumnReductionTestShapesReachTheirPaths) {
  EXPECT_EQ(PlanBackwardUnits(16896, 5, DType::kF32).units, 528);
  EXPECT_EQ(PlanBackwardUnits(12672, 20, DType::kF32).units, 132);
  EXPECT_EQ(PlanBackwardUnits(1000, 4100, DType::kF32).units, 125);
  EXPECT_EQ(PlanBackwardUnits(1000, 4100, DType::kBF16).units, 63);
  EXPECT_EQ(PlanBackwardUnits(2000, 1027, DType::kBF16).units, 250);
  EXPECT_LT(ColumnReduceSlices(63), kColumnReduceMaxSlices);
  EXPECT_EQ(ColumnReduceSlices(125), kColumnReduceMaxSlices);
}

}  // namespace
}  // namespace normsvc::kernels::detail
