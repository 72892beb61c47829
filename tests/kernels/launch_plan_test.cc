// The launch plans (kernels/src/launch_plan.h) for every hidden size the API
// allows: each covers its row, uses a kernel shape that exists, and depends
// on nothing but (hidden, dtype; backward: and the op). Pure C++: runs
// without a GPU. The backward's unit plans: backward_unit_plan_test.cc.
#include "launch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace normsvc::kernels::detail {
namespace {

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// The most threads a block of `p` may have.
int MostBlockThreads(const KernelPlan& p, int64_t hidden, bool forward) {
  if (p.layout == Layout::kStreamed) return kStreamedThreads;
  if (p.layout == Layout::kStaged) return kStagedWideBlockThreads;
  if (!forward && UsesStagedBackward(p)) {
    // fp32 rows past clusters of blocks of 512 take blocks of 1,024.
    const bool wide_fp32 = p.cluster > 1 && p.width == 4 &&
                           hidden > 2 * p.width * kMaxBlockThreads * kMaxClusterBlocks;
    return wide_fp32 ? kStagedWideBackwardThreads : kBackwardStagedBlockThreads;
  }
  return 512;
}

void ExpectValid(const KernelPlan& p, int64_t hidden, DType dtype, bool forward) {
  const std::string where = std::string(forward ? "forward " : "backward ") + DTypeName(dtype) +
                            " H=" + std::to_string(hidden);
  ASSERT_GE(p.Capacity(), hidden) << where;
  const int most_threads = MostBlockThreads(p, hidden, forward);
  ASSERT_LE(p.block_threads, most_threads) << where;
  // A launch asking for more dynamic shared memory than the kernels' limit
  // fails on the GPU; here it fails on the CPU.
  if (!forward) {
    ASSERT_LE(BackwardDynamicSmemBytes(p), kMaxDynamicSmem) << where;
  }
  if (p.layout == Layout::kStreamed) return;
  if (p.layout == Layout::kStaged) {
    ASSERT_TRUE(forward) << where;
    ASSERT_EQ(p.width, VectorWidth(dtype)) << where;
    const int64_t chunks = (hidden + p.width - 1) / p.width;
    if (hidden % p.width == 0 && chunks <= int64_t{4} * kMaxBlockThreads * kMaxClusterBlocks) {
      // Rows of whole chunks past two register blocks: 8 chunks a thread of
      // blocks of 512 (of 256 past 8,192 chunks), in as few blocks as hold
      // the row.
      ASSERT_GT(chunks, int64_t{4} * kMaxBlockThreads * 2) << where;
      const int block = chunks > int64_t{16} * kMaxBlockThreads ? 256 : kMaxBlockThreads;
      ASSERT_EQ(p.block_threads, block) << where;
      ASSERT_EQ(p.cluster, (chunks + 8 * block - 1) / (8 * block)) << where;
      ASSERT_EQ(p.row_threads, p.block_threads * p.cluster) << where;
      ASSERT_EQ(p.slots, (chunks + p.row_threads - 1) / p.row_threads) << where;
      ASSERT_LE(p.slots, 8) << where;
      ASSERT_LE(StagedForwardSmemBytes(p), kStagedTwoBlockBytes) << where;
      return;
    }
    // Forward rows past what the register layouts hold (vector: 4 chunks a
    // thread of 8 blocks; strided: 16 elements a thread of 8 blocks).
    const int64_t register_capacity = hidden % p.width == 0
                                          ? int64_t{4} * kMaxBlockThreads * kMaxClusterBlocks
                                          : int64_t{16} * kMaxBlockThreads * kMaxClusterBlocks;
    ASSERT_GT(hidden % p.width == 0 ? chunks : hidden, register_capacity) << where;
    ASSERT_EQ(p.cluster, kMaxClusterBlocks) << where;
    ASSERT_EQ(p.groups, 1) << where;
    ASSERT_EQ(p.row_threads, p.block_threads * p.cluster) << where;
    // As few slots as hold the row, within the shared memory a block may
    // have; wide blocks only where blocks of 512 would take more than
    // two-block bytes.
    ASSERT_EQ(p.slots, (chunks + p.row_threads - 1) / p.row_threads) << where;
    ASSERT_LE(StagedForwardSmemBytes(p), kStagedMaxBlockBytes) << where;
    ASSERT_LE(kStagedMaxBlockBytes, kMaxDynamicSmem);
    const int64_t narrow_slots = (chunks + kMaxBlockThreads * kMaxClusterBlocks - 1) /
                                 (kMaxBlockThreads * kMaxClusterBlocks);
    const bool narrow_fits =
        static_cast<std::size_t>(narrow_slots * kMaxBlockThreads * 16) <= kStagedTwoBlockBytes;
    ASSERT_EQ(p.block_threads, narrow_fits ? kMaxBlockThreads : kStagedWideBlockThreads) << where;
    return;
  }
  ASSERT_GE(p.cluster, 1) << where;
  ASSERT_LE(p.cluster, 8) << where;
  if (p.cluster == 1) {
    ASSERT_TRUE(IsPowerOfTwo(p.row_threads)) << where;
    ASSERT_EQ(p.row_threads * p.groups, p.block_threads) << where;
    if (p.row_threads > 32) {
      ASSERT_LE(p.groups, kMaxMultiWarpRowsPerBlock) << where;
    }
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
      // Rows of whole chunks span at most two register blocks; longer ones
      // are staged (StagesClusterRow).
      if (hidden % p.width == 0) {
        ASSERT_LE(p.cluster, 2) << where;
      }
    } else {
      ASSERT_TRUE(p.slots == 1 || p.slots == 2) << where;
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
      ExpectValid(PlanBackward(hidden, dtype, NormOp::kLayerNorm), hidden, dtype, false);
      ExpectValid(PlanBackward(hidden, dtype, NormOp::kRmsNorm), hidden, dtype, false);
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
  // Backward H=2049's plan is strided (for rows that do not share their
  // offsets; the others take PlanBackwardRealign's, below), and so are
  // forward rows with a partial chunk past kRealignMaxChunks chunks (bf16
  // H = 12289: 1537 chunks).
  EXPECT_EQ(PlanBackward(2049, DType::kBF16, NormOp::kLayerNorm).layout, Layout::kStrided);
  EXPECT_EQ(PlanForward(12289, DType::kBF16).layout, Layout::kStrided);
  EXPECT_EQ(PlanForward(12287, DType::kBF16).layout, Layout::kVector);
  // Rows of whole chunks in registers up to a cluster of two blocks of 512
  // (4,096 chunks: bf16 H = 32768, fp32 16384); longer ones staged, 8
  // chunks a thread in as few blocks of 512 as hold them (fp32 32768, bf16
  // 65536: 2), of 256 past 8,192 chunks (fp32 65536, 16-bit 131072: 8).
  const KernelPlan two_blocks = PlanForward(32768, DType::kBF16);
  EXPECT_EQ(two_blocks.layout, Layout::kVector);
  EXPECT_EQ(two_blocks.cluster, 2);
  EXPECT_EQ(PlanForward(16384, DType::kF32).layout, Layout::kVector);
  const KernelPlan fp32_big = PlanForward(65536, DType::kF32);
  EXPECT_EQ(fp32_big.layout, Layout::kStaged);
  EXPECT_EQ(fp32_big.cluster, 8);
  EXPECT_EQ(fp32_big.slots, 8);
  EXPECT_EQ(fp32_big.block_threads, 256);
  EXPECT_EQ(PlanForward(32768, DType::kF32).cluster, 2);
  EXPECT_EQ(PlanForward(16388, DType::kF32).layout, Layout::kStaged);
  EXPECT_EQ(PlanForward(16388, DType::kF32).slots, 5);
  EXPECT_EQ(PlanForward(65536, DType::kBF16).layout, Layout::kStaged);
  EXPECT_EQ(PlanForward(65536, DType::kBF16).cluster, 2);
  EXPECT_EQ(PlanForward(131072, DType::kF16).cluster, 8);
  EXPECT_EQ(PlanForward(98304, DType::kBF16).cluster, 6);
  EXPECT_EQ(PlanForward(98304, DType::kBF16).block_threads, 256);
  EXPECT_EQ(PlanForward(65544, DType::kBF16).cluster, 5);
  // Longer rows: staged in the shared memory of a cluster of 8 blocks while
  // they fit (fp32 H = 262144: 65536 chunks, 8 a thread of blocks of 1024,
  // 128 KiB a block; bf16: 8 a thread of blocks of 512, 64 KiB; bf16 131073:
  // a partial last chunk), streamed past 192 KiB a block.
  const KernelPlan staged = PlanForward(262144, DType::kF32);
  EXPECT_EQ(staged.layout, Layout::kStaged);
  EXPECT_EQ(staged.slots, 8);
  EXPECT_EQ(staged.block_threads, 1024);
  EXPECT_EQ(staged.cluster, 8);
  EXPECT_EQ(PlanForward(262144, DType::kBF16).slots, 8);
  EXPECT_EQ(PlanForward(262144, DType::kBF16).block_threads, 512);
  EXPECT_EQ(PlanForward(131073, DType::kBF16).layout, Layout::kStaged);
  EXPECT_EQ(PlanForward(65537, DType::kF32).layout, Layout::kStaged);
  EXPECT_EQ(PlanForward(393216, DType::kF32).layout, Layout::kStaged);
  EXPECT_EQ(PlanForward(393217, DType::kF32).layout, Layout::kStreamed);
  EXPECT_EQ(PlanForward(kMaxHidden, DType::kBF16).layout, Layout::kStreamed);
  EXPECT_EQ(PlanBackward(262144, DType::kF32, NormOp::kLayerNorm).layout, Layout::kStreamed);
  // Backward bf16 H=4096: 512 chunks, 2 a thread: 256 threads a row, 3 rows
  // in a block of 768 (the staged kernel).
  const KernelPlan b = PlanBackward(4096, DType::kBF16, NormOp::kLayerNorm);
  EXPECT_TRUE(UsesStagedBackward(b));
  EXPECT_EQ(b.row_threads, 256);
  EXPECT_EQ(b.groups, 3);
  EXPECT_EQ(b.block_threads, 768);
  EXPECT_FALSE(UsesStagedBackward(PlanBackward(2049, DType::kBF16, NormOp::kLayerNorm)));
  // Backward rows of such H within BackwardRealignKernel's reach take it when
  // they share their offsets (the launcher's test), as aligned words: bf16
  // H = 2049 covers 257 words, one a thread, 9 warps a row.
  const KernelPlan r = PlanBackwardRealign(2049, DType::kBF16);
  EXPECT_EQ(r.layout, Layout::kVector);
  EXPECT_EQ(r.slots, 1);
  EXPECT_EQ(r.width, 8);
  EXPECT_EQ(r.row_threads, 288);
  EXPECT_EQ(r.groups, 1);
  // fp32 H = 2049: 513 words, two a thread.
  EXPECT_EQ(PlanBackwardRealign(2049, DType::kF32).slots, 2);
  EXPECT_EQ(PlanBackwardRealign(2049, DType::kF32).row_threads, 288);
  // bf16 H = 300: 39 words, two warps a row, 4 rows a block.
  EXPECT_EQ(PlanBackwardRealign(300, DType::kBF16).row_threads, 64);
  EXPECT_EQ(PlanBackwardRealign(300, DType::kBF16).groups, 4);
  // Not served: whole words (4096), short rows (H = 5, 256 and under) and
  // rows of more than 1,024 words (bf16 H = 8191: 1,025).
  EXPECT_EQ(PlanBackwardRealign(4096, DType::kBF16).slots, 0);
  EXPECT_EQ(PlanBackwardRealign(5, DType::kBF16).slots, 0);
  EXPECT_EQ(PlanBackwardRealign(255, DType::kBF16).slots, 0);
  EXPECT_EQ(PlanBackwardRealign(8191, DType::kBF16).slots, 0);
  EXPECT_EQ(PlanBackwardRealign(8185, DType::kBF16).slots, 2);
}

// BackwardRealignKernel's plans: whole warps a row, enough words for a row at
// any offset, a block within kMaxBlockThreads and the named barriers (1 +
// group <= 15), its shared memory within the kernels' dynamic limit.
TEST(LaunchPlan, RealignedBackwardPlansHoldTheirRows) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int w = VectorWidth(dtype);
    for (int64_t hidden = 1; hidden <= kMaxHidden; ++hidden) {
      const KernelPlan p = PlanBackwardRealign(hidden, dtype);
      if (p.slots == 0) {
        ASSERT_TRUE(hidden % w == 0 || hidden <= kBackwardRealignMinHidden ||
                    RealignWordsPerRow(hidden, w) > 2 * kMaxBlockThreads)
            << DTypeName(dtype) << " H=" << hidden;
        continue;
      }
      const std::string where = std::string(DTypeName(dtype)) + " H=" + std::to_string(hidden);
      ASSERT_NE(hidden % w, 0) << where;
      ASSERT_EQ(p.width, w) << where;
      ASSERT_EQ(p.row_threads % 32, 0) << where;
      ASSERT_TRUE(p.slots == 1 || p.slots == 2) << where;
      // Words 0 .. ceil((s + H) / w) - 1 of a row s elements off a boundary.
      for (int s = 0; s < w; ++s) {
        ASSERT_GE(int64_t{p.row_threads} * p.slots, (s + hidden + w - 1) / w) << where;
      }
      // Two or more warps a row: RealignRowSum's barrier orders a row's
      // reads of the ring's statistics before the next copy into them.
      ASSERT_GE(p.row_threads, 64) << where;
      // No slot wholly idle in every thread.
      ASSERT_LT(int64_t{p.row_threads} * (p.slots - 1), RealignWordsPerRow(hidden, w)) << where;
      ASSERT_EQ(p.row_threads * p.groups, p.block_threads) << where;
      ASSERT_LE(p.block_threads, kMaxBlockThreads) << where;
      ASSERT_LE(p.groups, 8) << where;
      ASSERT_LE(RealignBackwardSmemBytes(p, hidden), kMaxDynamicSmem) << where;
    }
  }
}

TEST(LaunchPlan, RealignPeriodIsTheRowsBetweenEqualOffsets) {
  EXPECT_EQ(RealignPeriod(0, 8), 1);  // row pitch a multiple of 16 bytes
  EXPECT_EQ(RealignPeriod(1, 8), 8);  // bf16 H = 2049
  EXPECT_EQ(RealignPeriod(2, 8), 4);
  EXPECT_EQ(RealignPeriod(3, 8), 8);
  EXPECT_EQ(RealignPeriod(4, 8), 2);
  EXPECT_EQ(RealignPeriod(6, 8), 4);
  EXPECT_EQ(RealignPeriod(1, 4), 4);  // fp32 H = 2049
  EXPECT_EQ(RealignPeriod(2, 4), 2);
  EXPECT_EQ(RealignPeriod(3, 4), 4);
  // The definition: the smallest p > 0 with p * step a multiple of width.
  for (int width : {4, 8}) {
    for (int step = 0; step < width; ++step) {
      const int p = RealignPeriod(step, width);
      EXPECT_EQ((p * step) % width, 0);
      for (int q = 1; q < p; ++q) EXPECT_NE((q * step) % width, 0) << step << " " << q;
    }
  }
}

// Every row in exactly one unit, of its own offset class; whole row groups a
// unit; no more units than a wave (or the classes, when fewer rows).
TEST(LaunchPlan, RealignedBackwardUnitsCoverEveryRowOnce) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t hidden : {300, 2049, 4095, 8185}) {
      const KernelPlan plan = PlanBackwardRealign(hidden, dtype);
      if (plan.slots == 0) continue;
      for (int period : {1, 2, 4, 8}) {
        if (period > plan.width) continue;
        for (int64_t rows : {1, 2, 3, 7, 8, 9, 100, 1000, 8189, 16384}) {
          const RealignedBackwardUnits u = PlanRealignedBackwardUnits(rows, hidden, plan, period);
          const std::string where = std::string(DTypeName(dtype)) + " H=" + std::to_string(hidden) +
                                    " period " + std::to_string(period) + " rows " +
                                    std::to_string(rows);
          ASSERT_EQ(u.classes, std::min<int64_t>(period, rows)) << where;
          ASSERT_EQ(u.units, u.units_per_class * u.classes) << where;
          ASSERT_EQ(u.class_rows_per_unit % plan.groups, 0) << where;
          ASSERT_LE(u.units,
                    std::max<int64_t>(u.classes, kBackwardWaveUnits *
                                                     RealignBackwardResidentBlocks(plan, hidden)))
              << where;
          std::vector<int> seen(static_cast<std::size_t>(rows), 0);
          for (int64_t unit = 0; unit < u.units; ++unit) {
            const int64_t row_class = unit / u.units_per_class;
            const int64_t class_rows = (rows - row_class + period - 1) / period;
            const int64_t begin = (unit % u.units_per_class) * u.class_rows_per_unit;
            const int64_t end = std::min(class_rows, begin + u.class_rows_per_unit);
            for (int64_t i = begin; i < end; ++i) {
              const int64_t row = row_class + i * period;
              ASSERT_LT(row, rows) << where;
              ASSERT_EQ(row % period, row_class) << where;
              ++seen[static_cast<std::size_t>(row)];
            }
          }
          for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(seen[r], 1) << where << " row " << r;
        }
      }
    }
  }
  EXPECT_EQ(PlanRealignedBackwardUnits(0, 2049, PlanBackwardRealign(2049, DType::kBF16), 8).units,
            0);
  // bf16 8189 x 2049 (the benchmark's shape): 8 classes of 1,024 rows, three
  // blocks of 288 threads a multiprocessor: 49 units a class of 21 rows.
  const RealignedBackwardUnits bench =
      PlanRealignedBackwardUnits(8189, 2049, PlanBackwardRealign(2049, DType::kBF16), 8);
  EXPECT_EQ(RealignBackwardResidentBlocks(PlanBackwardRealign(2049, DType::kBF16), 2049), 3);
  EXPECT_EQ(bench.units_per_class, 49);
  EXPECT_EQ(bench.class_rows_per_unit, 21);
}

}  // namespace
}  // namespace normsvc::kernels::detail
