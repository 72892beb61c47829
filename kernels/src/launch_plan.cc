#include "launch_plan.h"

#include <algorithm>

namespace normsvc::kernels::detail {
namespace {

// Register-resident rows use blocks of at most kMaxBlockThreads threads (so
// the compiler may give each thread up to 128 registers), clusters of at
// most 8 blocks (the portable cluster size).
constexpr int kMaxCluster = kMaxClusterBlocks;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int PowerOfTwoAtLeast(int64_t n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

int PowerOfTwoAtMost(int64_t n) {
  int p = 1;
  while (static_cast<int64_t>(p) * 2 <= n) p <<= 1;
  return p;
}

// Rows per block for rows handled by at most one block: enough rows that a
// block has 256 threads.
KernelPlan InBlock(Layout layout, int slots, int width, int row_threads) {
  KernelPlan plan;
  plan.layout = layout;
  plan.slots = slots;
  plan.width = width;
  plan.row_threads = row_threads;
  plan.cluster = 1;
  plan.block_threads = std::max(row_threads, 256);
  plan.groups = plan.block_threads / row_threads;
  return plan;
}

// The staged backward's in-block rows: as many row teams as fit in
// kBackwardStagedBlockThreads threads (at least one), and no more rows of
// several warps than there are named barriers for (kMaxMultiWarpRowsPerBlock).
KernelPlan InWideBlock(int slots, int width, int row_threads) {
  KernelPlan plan = InBlock(Layout::kVector, slots, width, row_threads);
  plan.groups = std::max(1, kBackwardStagedBlockThreads / row_threads);
  if (row_threads > 32) plan.groups = std::min(plan.groups, kMaxMultiWarpRowsPerBlock);
  plan.block_threads = plan.groups * row_threads;
  return plan;
}

KernelPlan InCluster(Layout layout, int slots, int width, int block_threads, int cluster) {
  KernelPlan plan;
  plan.layout = layout;
  plan.slots = slots;
  plan.width = width;
  plan.row_threads = block_threads * cluster;
  plan.cluster = cluster;
  plan.block_threads = block_threads;
  plan.groups = 1;
  return plan;
}

KernelPlan Streamed() {
  KernelPlan plan;
  plan.layout = Layout::kStreamed;
  plan.slots = 0;
  plan.width = 1;
  plan.row_threads = kStreamedThreads;
  plan.block_threads = kStreamedThreads;
  plan.groups = 1;
  return plan;
}

// The staged plan of a row of `chunks` chunks in clusters of `cluster`
// blocks of `block_threads`: as few chunks a thread as hold the row.
KernelPlan StagedPlan(int64_t chunks, int width, int block_threads, int cluster) {
  const int64_t slots = CeilDiv(chunks, int64_t{block_threads} * cluster);
  return InCluster(Layout::kStaged, static_cast<int>(slots), width, block_threads, cluster);
}

// Forward rows past the register layouts: staged in a cluster's shared
// memory while they fit (kStagedMaxBlockBytes a block; blocks of
// kStagedWideBlockThreads past kStagedTwoBlockBytes), else streamed.
KernelPlan StagedOrStreamed(int64_t hidden, int width) {
  const int64_t chunks = CeilDiv(hidden, width);
  KernelPlan plan = StagedPlan(chunks, width, kMaxBlockThreads, kMaxCluster);
  if (StagedForwardSmemBytes(plan) > kStagedTwoBlockBytes) {
    plan = StagedPlan(chunks, width, kStagedWideBlockThreads, kMaxCluster);
  }
  return StagedForwardSmemBytes(plan) <= kStagedMaxBlockBytes ? plan : Streamed();
}

// Rows of whole chunks that the register layout spreads over clusters of
// more than two blocks (more than 4,096 chunks: fp32 H = 16,388 to 65,536,
// 16-bit H = 32,776 to 131,072) are staged instead: kStagedClusterRowSlots
// chunks a thread in blocks of kMaxBlockThreads, in clusters of as few
// blocks as hold the row (2 to 4), so a thread has twice the register
// layout's bytes of x in flight and a row's statistics cross half the
// blocks. Measured on an H100 (BENCHMARKS.md, round 29), LayerNorm /
// RMSNorm of copy: fp32 65536 from 0.62 / 0.68 to 0.82 / 0.87, fp32 32768
// from 0.68 / 0.72 to 0.87 / 0.90, bf16 65536 from 0.61 / 0.69 to 0.69 /
// 0.78, bf16 131072 from 0.58 / 0.66 to 0.62 / 0.71. Rows within two
// blocks stay in registers: there the staged plans lost. Rows of more than
// two such blocks (8,192 chunks: fp32 H > 32,768, 16-bit H > 65,536) take
// blocks of kStagedSmallBlockThreads in clusters of 5 to 8: on an H100,
// LayerNorm / RMSNorm of copy, fp32 65536 0.82 / 0.88 -> 0.83-0.85 / 0.89,
// bf16 131072 unchanged within 0.01 (BENCHMARKS.md, round 44c); shorter
// rows lost with them (round 44b).
constexpr int kStagedClusterRowSlots = 8;
constexpr int kStagedSmallBlockThreads = 256;

bool StagesClusterRow(int64_t chunks) { return chunks > int64_t{4} * kMaxBlockThreads * 2; }

KernelPlan StagedInSmallerClusters(int64_t chunks, int width) {
  const int block_threads = chunks > int64_t{2} * kStagedClusterRowSlots * kMaxBlockThreads
                                ? kStagedSmallBlockThreads
                                : kMaxBlockThreads;
  const int cluster =
      static_cast<int>(CeilDiv(chunks, int64_t{kStagedClusterRowSlots} * block_threads));
  return StagedPlan(chunks, width, block_threads, cluster);
}

}  // namespace

int64_t KernelPlan::Capacity() const {
  if (layout == Layout::kStreamed) return kMaxHidden;
  return static_cast<int64_t>(row_threads) * slots * width;
}

int VectorWidth(DType dtype) { return static_cast<int>(16 / DTypeSize(dtype)); }

// Forward: up to 4 chunks (64 bytes of x) per thread in the vector layout; a
// row takes one warp or less up to 128 chunks, one block (at most
// kMaxBlockThreads) up to 2048 chunks, then a cluster of up to 8 blocks
// (rows of more than two blocks staged instead: StagesClusterRow);
// longer rows are staged in a cluster's shared memory, or streamed past
// that (StagedOrStreamed).
// Hidden sizes that are not a multiple of the vector width take the same
// layout with a partial last chunk up to 3 * kMaxBlockThreads chunks: the
// per-element work is the vector layout's (a thread's chunk is 16
// contiguous bytes in registers), and ForwardRealignKernel realigns rows
// that do not start on a 16-byte boundary. The strided layout (one element
// per slot, about 30 instructions an element on the H200: BENCHMARKS.md,
// round 6) stays for longer such rows, which the realigning kernel's
// registers do not hold and its specialized kernel serves at any alignment
// (element by element, coalesced across a warp).
KernelPlan PlanForward(int64_t hidden, DType x_dtype) {
  const int w = VectorWidth(x_dtype);
  const int64_t chunks = CeilDiv(hidden, w);
  if (chunks <= 32) return InBlock(Layout::kVector, 1, w, PowerOfTwoAtLeast(chunks));
  if (chunks <= 64) return InBlock(Layout::kVector, 2, w, 32);
  if (hidden % w != 0) {
    if (chunks <= kRealignMaxChunks) {
      // The realigning kernel holds two aligned chunks for each of a
      // thread's chunks, so slots cost twice the registers: three at most
      // (bf16 H = 2049: 257 chunks, 128 threads of 3 slots; with 4 slots
      // the kernel spills).
      const int row_threads = static_cast<int>(std::clamp<int64_t>(
          PowerOfTwoAtLeast(CeilDiv(chunks, kRealignMaxSlots)), 32, kMaxBlockThreads));
      return InBlock(Layout::kVector, static_cast<int>(CeilDiv(chunks, row_threads)), w,
                     row_threads);
    }
    if (hidden <= 16 * kMaxBlockThreads) {
      return InBlock(Layout::kStrided, 16, 1,
                     std::clamp(PowerOfTwoAtMost(hidden / 8), 64, kMaxBlockThreads));
    }
    if (hidden <= 16 * kMaxBlockThreads * kMaxCluster) {
      return InCluster(Layout::kStrided, 16, 1, kMaxBlockThreads,
                       static_cast<int>(CeilDiv(hidden, 16 * kMaxBlockThreads)));
    }
    return StagedOrStreamed(hidden, w);
  }
  if (chunks <= 4 * kMaxBlockThreads) {
    return InBlock(Layout::kVector, 4, w, std::max(32, PowerOfTwoAtLeast(CeilDiv(chunks, 4))));
  }
  if (chunks <= 4 * kMaxBlockThreads * kMaxCluster) {
    if (StagesClusterRow(chunks)) return StagedInSmallerClusters(chunks, w);
    return InCluster(Layout::kVector, 4, w, kMaxBlockThreads,
                     static_cast<int>(CeilDiv(chunks, 4 * kMaxBlockThreads)));
  }
  return StagedOrStreamed(hidden, w);
}

// Backward holds the dgamma/dbeta accumulators of its columns per thread:
// two 16-byte chunks of x's columns in the vector layout (8 fp32 or 16 16-bit
// elements; one chunk for RMSNorm's 16-bit cluster rows of blocks of 512),
// whose x and dy are staged through shared memory
// (UsesStagedBackward); 8 elements in the strided one, with the next row's x
// and dy in registers.
KernelPlan PlanBackward(int64_t hidden, DType x_dtype, NormOp op) {
  const int w = VectorWidth(x_dtype);
  if (hidden % w == 0) {
    const int64_t chunks = hidden / w;
    constexpr int slots = 2;
    if (chunks <= 32) return InWideBlock(1, w, PowerOfTwoAtLeast(chunks));
    if (chunks <= slots * kMaxBlockThreads) {
      return InWideBlock(slots, w, std::max(32, PowerOfTwoAtLeast(CeilDiv(chunks, slots))));
    }
    // RMSNorm's 16-bit rows past a block, while eight blocks of 512 hold them
    // one chunk a thread (H = 8,200-32,768): twice the blocks a cluster, so
    // about half the units and half the partial bytes, and no spills. +0.03
    // of copy at bf16 RMSNorm 1024 x 16384 on an H100; LayerNorm lost 0.03
    // there (its row pass 0.10: two sums a row and more work an element over
    // half the elements a thread), and blocks of 1,024 for the longer 16-bit
    // rows gained under 0.01 (BENCHMARKS.md, round 35).
    if (op == NormOp::kRmsNorm && w == 8 &&
        chunks <= static_cast<int64_t>(kMaxBlockThreads) * kMaxCluster) {
      return InCluster(Layout::kVector, 1, w, kMaxBlockThreads,
                       static_cast<int>(CeilDiv(chunks, kMaxBlockThreads)));
    }
    if (chunks <= static_cast<int64_t>(slots) * kMaxBlockThreads * kMaxCluster) {
      return InCluster(Layout::kVector, slots, w, kMaxBlockThreads,
                       static_cast<int>(CeilDiv(chunks, slots * kMaxBlockThreads)));
    }
    // fp32 rows past that (H = 32,772-65,536): blocks of 1,024 (the staged
    // kernel's fp32 launch bound), still two chunks a thread. The register
    // kernel's four chunks a thread in blocks of 512, which served them
    // before, ran one block (16 warps) a multiprocessor: 0.71 of copy for
    // fp32 LayerNorm 256 x 65536 on an H100, 0.78 here (BENCHMARKS.md,
    // round 33).
    if (w == 4 &&
        chunks <= static_cast<int64_t>(slots) * kStagedWideBackwardThreads * kMaxCluster) {
      return InCluster(Layout::kVector, slots, w, kStagedWideBackwardThreads,
                       static_cast<int>(CeilDiv(chunks, slots * kStagedWideBackwardThreads)));
    }
    return Streamed();
  }
  if (hidden <= 32) return InBlock(Layout::kStrided, 1, 1, PowerOfTwoAtLeast(hidden));
  if (hidden <= 256) return InBlock(Layout::kStrided, 8, 1, 32);
  if (hidden <= 8 * kMaxBlockThreads) {
    return InBlock(Layout::kStrided, 8, 1,
                   std::clamp(PowerOfTwoAtMost(hidden / 4), 64, kMaxBlockThreads));
  }
  if (hidden <= 8 * kMaxBlockThreads * kMaxCluster) {
    return InCluster(Layout::kStrided, 8, 1, kMaxBlockThreads,
                     static_cast<int>(CeilDiv(hidden, 8 * kMaxBlockThreads)));
  }
  return Streamed();
}

bool BatchesSavedStatistics(const KernelPlan& plan, DType x_dtype, NormOp op) {
  if (!UsesStagedBackward(plan) || plan.cluster == 1 || plan.slots != 2) return false;
  return DTypeSize(x_dtype) == 4 ? plan.block_threads == kStagedWideBackwardThreads
                                 : op == NormOp::kRmsNorm;
}

int ColumnReduceSlices(int64_t units) {
  return static_cast<int>(
      std::clamp<int64_t>(CeilDiv(units, kColumnReduceUnitsPerThread), 1, kColumnReduceMaxSlices));
}

bool WideColumnReduction(int64_t hidden) {
  return hidden % 4 == 0 && hidden >= kWideColumnReduceMinHidden;
}

bool DiscardsPartials(int64_t hidden) { return hidden >= kDiscardPartialsMinHidden; }

std::size_t BackwardDynamicSmemBytes(const KernelPlan& plan) {
  if (UsesStagedBackward(plan)) return BackwardStagedSmemBytes(plan.block_threads, plan.slots);
  if (plan.layout != Layout::kStreamed && plan.groups > 1) {
    return static_cast<std::size_t>(plan.block_threads) * plan.slots * plan.width * sizeof(float);
  }
  return 0;
}

int BackwardResidentBlocks(const KernelPlan& plan, DType x_dtype) {
  if (plan.layout == Layout::kStreamed) return 1;
  if (UsesStagedBackward(plan)) {
    // 16-bit in-block rows: (kBackwardStagedBlockThreads, 1), up to 80
    // registers, so one block of 512 or more threads. The others: 64
    // registers (fp32: (1024, 1); 16-bit clusters: (512, 2)).
    if (DTypeSize(x_dtype) != 4 && plan.cluster == 1) return 1;
    return std::max(1, 1024 / plan.block_threads);
  }
  // BackwardRowsKernel (the strided layout), (512, 1): up to 128 registers a
  // thread with 8 slots, 40 with one (rows of at most 32 elements).
  return std::max(1, (plan.slots == 1 ? 1024 : 512) / plan.block_threads);
}

int ActiveClusters(int cluster, int blocks_per_sm) {
  // cudaOccupancyMaxActiveClusters on the H200 for the backward kernels
  // (kernels/bench/plan_occupancy, 2026-12-02), by cluster size 2..8, for one
  // and two blocks a multiprocessor. 132 x blocks / cluster would be 66, 44,
  // 33, 26, 22, 18, 16 and 132, 88, 66, 52, 44, 37, 33.
  static constexpr int kOneBlock[] = {66, 39, 30, 22, 17, 15, 15};
  static constexpr int kTwoBlocks[] = {132, 79, 62, 47, 39, 32, 30};
  if (cluster <= 1) return static_cast<int>(kBackwardWaveUnits) * std::max(1, blocks_per_sm);
  const int index = std::min(cluster, kMaxClusterBlocks) - 2;
  if (blocks_per_sm <= 1) return kOneBlock[index];
  return kTwoBlocks[index] * blocks_per_sm / 2;
}

int64_t BackwardWaveUnits(const KernelPlan& plan, DType x_dtype) {
  return ActiveClusters(plan.cluster, BackwardResidentBlocks(plan, x_dtype));
}

int64_t RealignWordsPerRow(int64_t hidden, int width) { return CeilDiv(hidden + width - 1, width); }

KernelPlan PlanBackwardRealign(int64_t hidden, DType x_dtype) {
  KernelPlan none;
  none.slots = 0;
  const int w = VectorWidth(x_dtype);
  if (hidden % w == 0 || hidden <= kBackwardRealignMinHidden) return none;
  const int64_t words = RealignWordsPerRow(hidden, w);
  const int slots = words <= kMaxBlockThreads ? 1 : kBackwardRealignMaxSlots;
  const int64_t row_threads = 32 * CeilDiv(words, 32 * slots);
  if (row_threads > kMaxBlockThreads) return none;
  KernelPlan plan;
  plan.layout = Layout::kVector;
  plan.slots = slots;
  plan.width = w;
  plan.row_threads = static_cast<int>(row_threads);
  plan.cluster = 1;
  // Several rows a block only for short rows: a block's gamma and
  // accumulator words grow with its threads (RealignBackwardSmemBytes).
  plan.groups = std::max(1, kBackwardRealignGroupThreads / plan.row_threads);
  plan.block_threads = plan.groups * plan.row_threads;
  return plan;
}

int RealignPeriod(int step, int width) {
  int a = ((step % width) + width) % width;
  int b = width;
  while (a != 0) {
    const int t = b % a;
    b = a;
    a = t;
  }
  return width / b;
}

std::size_t RealignBackwardSmemBytes(const KernelPlan& plan, int64_t hidden) {
  const int64_t words = int64_t{3} * plan.slots * plan.width * plan.block_threads;
  const int64_t combine = plan.groups > 1 ? plan.groups * hidden : 0;
  const std::size_t ring = RealignUsesRing(plan.slots, plan.width)
                               ? RealignRingBytes(plan.slots, plan.block_threads)
                               : 0;
  return static_cast<std::size_t>(words + combine) * sizeof(float) + ring;
}

int RealignBackwardResidentBlocks(const KernelPlan& plan, int64_t hidden) {
  const int registers =
      plan.slots == 1 ? kRealignBackwardRegistersOneSlot : kRealignBackwardRegistersTwoSlots;
  const int by_registers = 65536 / (plan.block_threads * registers);
  const int by_threads = 2048 / plan.block_threads;
  // 228 KB a multiprocessor, 1 KB of it reserved a block, and the kernel's
  // 768 bytes of static row-sum scratch.
  const int by_smem =
      static_cast<int>(228 * 1024 / (RealignBackwardSmemBytes(plan, hidden) + 1024 + 768));
  return std::max(1, std::min({by_registers, by_threads, by_smem}));
}

RealignedBackwardUnits PlanRealignedBackwardUnits(int64_t rows, int64_t hidden,
                                                  const KernelPlan& plan, int period) {
  RealignedBackwardUnits result;
  if (rows <= 0 || period <= 0) return result;
  result.classes = static_cast<int>(std::min<int64_t>(period, rows));
  // Class 0 has the most rows; the others as many or one fewer.
  const int64_t class_rows = CeilDiv(rows, period);
  const int64_t cap = kBackwardWaveUnits * RealignBackwardResidentBlocks(plan, hidden);
  const int64_t wanted =
      std::clamp<int64_t>(cap / result.classes, 1, CeilDiv(class_rows, plan.groups));
  result.class_rows_per_unit = CeilDiv(CeilDiv(class_rows, wanted), plan.groups) * plan.groups;
  result.units_per_class = CeilDiv(class_rows, result.class_rows_per_unit);
  result.units = result.units_per_class * result.classes;
  return result;
}

BackwardUnits PlanBackwardUnits(int64_t rows, int64_t hidden, DType x_dtype, NormOp op) {
  BackwardUnits result;
  if (rows <= 0) return result;
  const KernelPlan plan = PlanBackward(hidden, x_dtype, op);
  const int64_t cap = BackwardWaveUnits(plan, x_dtype);
  const int64_t wanted = std::min(cap, CeilDiv(rows, plan.groups));
  // Whole row groups a unit, so that no group of a block idles but in the last unit.
  result.rows_per_unit = CeilDiv(CeilDiv(rows, wanted), plan.groups) * plan.groups;
  result.units = CeilDiv(rows, result.rows_per_unit);
  return result;
}

}  // namespace normsvc::kernels::detail
