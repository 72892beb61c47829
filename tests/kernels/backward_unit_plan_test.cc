// The backward's unit plans (kernels/src/launch_plan.h): how rows split into
// units of partials (one wave of them), how the column reduction slices the
// units, and the plans' shapes that the partial stores and the column
// reduction's GPU tests rely on. Pure C++: runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include "launch_plan.h"

namespace normsvc::kernels::detail {
namespace {

TEST(BackwardUnitPlan, BackwardUnitsCoverEveryRowOnce) {
  for (int64_t rows : {1, 2, 3, 7, 100, 1000, 16384, 1 << 20}) {
    for (int64_t hidden : {1, 768, 4096, 65536, 262144}) {
      const BackwardUnits u = PlanBackwardUnits(rows, hidden, DType::kBF16, NormOp::kLayerNorm);
      ASSERT_GE(u.units, 1);
      EXPECT_GE(u.units * u.rows_per_unit, rows);
      EXPECT_LT((u.units - 1) * u.rows_per_unit, rows);
      EXPECT_EQ(u.rows_per_unit % PlanBackward(hidden, DType::kBF16, NormOp::kLayerNorm).groups, 0);
    }
  }
  EXPECT_EQ(PlanBackwardUnits(0, 4096, DType::kF32, NormOp::kLayerNorm).units, 0);
}

// 16-bit rows: one wave of units, as many as the multiprocessors hold at
// once, so long rows do not pay extra waves and extra rows of partials.
TEST(BackwardUnitPlan, BackwardUnitsFillOneWave) {
  // The H200's active clusters (cudaOccupancyMaxActiveClusters): below
  // 132 x blocks / cluster from four blocks a cluster on.
  EXPECT_EQ(ActiveClusters(1, 2), 264);
  EXPECT_EQ(ActiveClusters(2, 2), 132);
  EXPECT_EQ(ActiveClusters(4, 2), 62);
  EXPECT_EQ(ActiveClusters(8, 2), 30);
  EXPECT_EQ(ActiveClusters(8, 1), 15);
  // bf16 65536: clusters of 8 blocks of 512, two blocks a multiprocessor: 30
  // at once, so 29 units of 9 rows (not 32 of 8: a second wave of two).
  EXPECT_EQ(
      BackwardResidentBlocks(PlanBackward(65536, DType::kBF16, NormOp::kLayerNorm), DType::kBF16),
      2);
  EXPECT_EQ(PlanBackwardUnits(256, 65536, DType::kBF16, NormOp::kLayerNorm).units, 29);
  EXPECT_EQ(PlanBackwardUnits(256, 65536, DType::kBF16, NormOp::kLayerNorm).rows_per_unit, 9);
  // bf16 8192: one in-block block of 512 (80 registers) a multiprocessor.
  EXPECT_EQ(PlanBackwardUnits(2048, 8192, DType::kBF16, NormOp::kLayerNorm).units, 128);
  // fp32 16384: clusters of 4, two blocks a multiprocessor: 62 at once.
  EXPECT_EQ(PlanBackwardUnits(1024, 16384, DType::kF32, NormOp::kLayerNorm).units, 61);
  EXPECT_EQ(PlanBackwardUnits(1024, 16384, DType::kF32, NormOp::kLayerNorm).rows_per_unit, 17);
  // fp32 65536: clusters of 8 blocks of 1,024 of the staged kernel, one block
  // a multiprocessor: 15 at once.
  EXPECT_EQ(PlanBackward(65536, DType::kF32, NormOp::kLayerNorm).block_threads,
            kStagedWideBackwardThreads);
  EXPECT_EQ(PlanBackward(65536, DType::kF32, NormOp::kLayerNorm).cluster, 8);
  EXPECT_EQ(PlanBackwardUnits(256, 65536, DType::kF32, NormOp::kLayerNorm).units, 15);
  // The boundary: fp32 32768 is the last row in clusters of blocks of 512
  // (8 of them); 32772 takes 5 blocks of 1,024.
  EXPECT_EQ(PlanBackward(32768, DType::kF32, NormOp::kLayerNorm).block_threads, kMaxBlockThreads);
  EXPECT_EQ(PlanBackward(32768, DType::kF32, NormOp::kLayerNorm).cluster, 8);
  EXPECT_EQ(PlanBackward(32772, DType::kF32, NormOp::kLayerNorm).block_threads,
            kStagedWideBackwardThreads);
  EXPECT_EQ(PlanBackward(32772, DType::kF32, NormOp::kLayerNorm).cluster, 5);
  // RMSNorm's 16-bit rows of 8,200-32,768: one chunk a thread in clusters of
  // blocks of 512 (LayerNorm's: two chunks, half the blocks). bf16 16384: 4
  // blocks, 62 clusters at once, so 61 units of 17 rows (LayerNorm: 128 of 8).
  const KernelPlan rms = PlanBackward(16384, DType::kBF16, NormOp::kRmsNorm);
  EXPECT_EQ(rms.slots, 1);
  EXPECT_EQ(rms.block_threads, kMaxBlockThreads);
  EXPECT_EQ(rms.cluster, 4);
  EXPECT_EQ(PlanBackwardUnits(1024, 16384, DType::kBF16, NormOp::kRmsNorm).units, 61);
  EXPECT_EQ(PlanBackward(16384, DType::kBF16, NormOp::kLayerNorm).slots, 2);
  EXPECT_EQ(PlanBackward(16384, DType::kBF16, NormOp::kLayerNorm).cluster, 2);
  EXPECT_EQ(PlanBackwardUnits(1024, 16384, DType::kBF16, NormOp::kLayerNorm).units, 128);
  // Its boundaries: 8192 is in a block (two chunks a thread), 8200 takes 3
  // blocks, 32768 8 blocks; 32776 takes LayerNorm's plan (5 blocks of 512, two
  // chunks a thread), as do fp32 rows.
  for (auto [hidden, dtype, cluster, slots] : {std::tuple{8192, DType::kF16, 1, 2},
                                               {8200, DType::kF16, 3, 1},
                                               {32768, DType::kBF16, 8, 1},
                                               {32776, DType::kBF16, 5, 2},
                                               {16384, DType::kF32, 4, 2}}) {
    const KernelPlan p = PlanBackward(hidden, dtype, NormOp::kRmsNorm);
    EXPECT_EQ(std::pair(p.cluster, p.slots), std::pair(cluster, slots)) << hidden;
  }
  // bf16 4096: one block of 768 a multiprocessor, whole groups of 3 rows.
  EXPECT_EQ(PlanBackwardUnits(4096, 4096, DType::kBF16, NormOp::kLayerNorm).units, 125);
  for (int64_t hidden : {1, 64, 768, 2049, 4096, 8192, 16384, 32768, 65536, 262144}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        const KernelPlan plan = PlanBackward(hidden, dtype, op);
        const int64_t wave = ActiveClusters(plan.cluster, BackwardResidentBlocks(plan, dtype));
        EXPECT_LE(wave, kBackwardWaveUnits * BackwardResidentBlocks(plan, dtype) / plan.cluster);
        EXPECT_LE(PlanBackwardUnits(1 << 20, hidden, dtype, op).units, std::max<int64_t>(1, wave))
            << hidden;
      }
    }
  }
}

// The staged backward kernels that load saved statistics kStatisticsBatch
// rows at a time: fp32 rows in clusters of blocks of 1,024 (both ops), and
// RMSNorm's 16-bit rows of two chunks a thread in clusters.
TEST(BackwardUnitPlan, SavedStatisticsBatchedWhereTheyPaid) {
  const auto batched = [](int64_t hidden, DType dtype, NormOp op) {
    return BatchesSavedStatistics(PlanBackward(hidden, dtype, op), dtype, op);
  };
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    EXPECT_TRUE(batched(65536, DType::kF32, op));
    EXPECT_TRUE(batched(32772, DType::kF32, op));
    EXPECT_FALSE(batched(32768, DType::kF32, op));  // blocks of 512
    EXPECT_FALSE(batched(4096, DType::kF32, op));   // in a block
    EXPECT_FALSE(batched(4096, DType::kBF16, op));
  }
  EXPECT_TRUE(batched(65536, DType::kBF16, NormOp::kRmsNorm));
  EXPECT_TRUE(batched(32776, DType::kF16, NormOp::kRmsNorm));
  EXPECT_FALSE(batched(65536, DType::kBF16, NormOp::kLayerNorm));
  EXPECT_FALSE(batched(16384, DType::kBF16, NormOp::kRmsNorm));  // one chunk a thread
  EXPECT_FALSE(batched(16384, DType::kBF16, NormOp::kLayerNorm));
}

TEST(BackwardUnitPlan, ColumnReduceSlicesFollowTheUnitCount) {
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
TEST(BackwardUnitPlan, ColumnReductionTestShapesReachTheirPaths) {
  EXPECT_EQ(PlanBackwardUnits(16896, 5, DType::kF32, NormOp::kLayerNorm).units, 528);
  EXPECT_EQ(PlanBackwardUnits(12672, 20, DType::kF32, NormOp::kLayerNorm).units, 132);
  EXPECT_EQ(PlanBackwardUnits(1000, 4100, DType::kF32, NormOp::kLayerNorm).units, 125);
  EXPECT_EQ(PlanBackwardUnits(1000, 4100, DType::kBF16, NormOp::kLayerNorm).units, 63);
  EXPECT_EQ(PlanBackwardUnits(2000, 1027, DType::kBF16, NormOp::kLayerNorm).units, 250);
  EXPECT_LT(ColumnReduceSlices(63), kColumnReduceMaxSlices);
  EXPECT_EQ(ColumnReduceSlices(125), kColumnReduceMaxSlices);
}

// WriteUnitPartials stores a 16-bit row's partials a warp at a time (runs
// of 512 bytes, the warp's first chunk from its lanes) where a block holds
// one row's share: those rows are whole warps in every block.
TEST(BackwardUnitPlan, SixteenBitBackwardRowsOneABlockAreWholeWarps) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int64_t hidden = 8; hidden <= kMaxHidden; hidden += 8) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        const KernelPlan p = PlanBackward(hidden, dtype, op);
        if (p.layout != Layout::kVector || p.groups != 1) continue;
        ASSERT_EQ(p.row_threads % 32, 0) << hidden;
        ASSERT_EQ(p.block_threads % 32, 0) << hidden;
        ASSERT_EQ(p.row_threads, p.block_threads * p.cluster) << hidden;
      }
    }
  }
}

TEST(BackwardUnitPlan, WideColumnReductionTakesLongRowsOfWholeColumnQuads) {
  EXPECT_FALSE(WideColumnReduction(4096));
  EXPECT_FALSE(WideColumnReduction(8192));
  EXPECT_FALSE(WideColumnReduction(16383));
  EXPECT_FALSE(WideColumnReduction(16386));  // not a multiple of 4
  for (int64_t hidden : {16384, 16388, 65536, 262144}) EXPECT_TRUE(WideColumnReduction(hidden));
}

// The column reductions drop their partials from the L2 from H = 4096 on,
// whatever the column count's divisibility (each line is checked on its
// own); below it they keep them.
TEST(BackwardUnitPlan, PartialsDroppedFromRowsOf4096On) {
  EXPECT_FALSE(DiscardsPartials(1));
  EXPECT_FALSE(DiscardsPartials(2049));
  EXPECT_FALSE(DiscardsPartials(4095));
  EXPECT_TRUE(DiscardsPartials(4096));
  EXPECT_TRUE(DiscardsPartials(4100));
  EXPECT_TRUE(DiscardsPartials(65536));
}

// The shapes of BackwardColumnReduction.WideKernelGivesTheNarrowKernelsBits
// (gpu_column_reduce_test.cc) reach the slice counts its comments name.
TEST(BackwardUnitPlan, WideColumnReductionTestShapesReachTheirSlices) {
  EXPECT_EQ(PlanBackwardUnits(12672, 20, DType::kF32, NormOp::kLayerNorm).units, 132);
  EXPECT_EQ(PlanBackwardUnits(1000, 4100, DType::kF32, NormOp::kLayerNorm).units, 125);
  EXPECT_EQ(
      ColumnReduceSlices(PlanBackwardUnits(1000, 4100, DType::kBF16, NormOp::kLayerNorm).units),
      16);
  EXPECT_EQ(ColumnReduceSlices(PlanBackwardUnits(37, 4096, DType::kF32, NormOp::kLayerNorm).units),
            10);
  EXPECT_EQ(ColumnReduceSlices(PlanBackwardUnits(20, 4096, DType::kF32, NormOp::kLayerNorm).units),
            5);
  EXPECT_EQ(PlanBackwardUnits(58, 65536, DType::kBF16, NormOp::kLayerNorm).units, 29);
  EXPECT_EQ(ColumnReduceSlices(29), 8);
}

}  // namespace
}  // namespace normsvc::kernels::detail
