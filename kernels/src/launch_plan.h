// How a row of a given hidden size and dtype is mapped onto GPU threads.
//
// Contract: a plan is a function of (hidden, x dtype) only, never of the row
// count or of the other segments of a launch. Everything that decides the
// order of floating-point operations on a row (chunk width, slots per thread,
// threads per row, cluster size) is in the plan, so a row's result bits
// depend only on its own data, hidden size and dtypes (batch invariance).
// A launcher may pack the plan's rows into blocks differently (rows per
// block, WaveRowsPlan in kernel_registry.h) but never changes those fields.
// Whether a segment may use 16-byte accesses (pointer alignment) changes only
// the memory instructions, never the arithmetic. One exception, in the
// backward only (which the issue asks to be reproducible run to run, not
// alignment-free): PlanBackwardRealign's rows, whose order of operations
// follows each row's offset from a 16-byte boundary (below).
//
// Pure C++ (no CUDA) so the planning rules are tested on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

enum class Layout : uint8_t {
  // Chunks of `width` contiguous elements (16 bytes of x); chunk c belongs to
  // row thread c % row_threads, register slot c / row_threads. A row has
  // ceil(hidden / width) chunks: forward plans of at most kRealignMaxChunks
  // chunks allow a partial last chunk (hidden % width != 0; its missing
  // elements are zeros in registers, left out of every sum and never read or
  // written), backward plans do not. PlanBackwardRealign's plans use this
  // layout for aligned 16-byte words rather than chunks of the row (its
  // comment has the mapping), for H not a multiple of the width.
  kVector = 0,
  // One element per chunk (width 1): element e belongs to row thread
  // e % row_threads. For hidden sizes that are not a multiple of the vector
  // width: every backward plan (rows that BackwardRealignKernel does not
  // take: PlanBackwardRealign), and forward plans of more than
  // kRealignMaxChunks chunks.
  kStrided = 1,
  // Rows too large for registers: one 1024-thread block per row re-reads the
  // row from global memory (forward: 3 passes; backward: up to 4). Forward
  // rows take it only beyond the staged layout's capacity.
  kStreamed = 2,
  // Forward rows too large for registers that fit in the shared memory of a
  // cluster (ForwardStagedKernel, forward_staged_kernel.cuh): chunks of
  // `width` elements (16 bytes of x, a partial last chunk allowed) mapped as
  // in kVector, a thread's `slots` chunks held in its block's shared memory;
  // a cluster of kMaxClusterBlocks blocks of kMaxBlockThreads or
  // kStagedWideBlockThreads a row (below). Also rows of whole chunks past
  // two register blocks (4,096 chunks: fp32 H > 16,384, 16-bit H > 32,768),
  // which it serves faster than the register clusters: 8 chunks a thread in
  // clusters of 2 blocks of kMaxBlockThreads, past 8,192 chunks of 5 to 8
  // blocks of 256 (launch_plan.cc, StagesClusterRow). Each element is read
  // from global memory once.
  kStaged = 3,
};

// The most blocks of a row's cluster (the portable cluster size): the
// planner's limit, and the size of the kernels' per-block register arrays.
inline constexpr int kMaxClusterBlocks = 8;

// The most threads of a block of register-resident rows, and the block size
// of every cluster plan but the forward's staged ones and the backward's fp32
// rows past clusters of it (kStagedWideBackwardThreads); kernels' launch
// bounds rely on it.
inline constexpr int kMaxBlockThreads = 512;

// ForwardRealignKernel holds two aligned chunks a slot; with four slots it
// spills registers (ptxas: 224-272 bytes of spill stores for 16-bit rows).
inline constexpr int kRealignMaxSlots = 3;

// The longest forward rows with a partial last chunk that take the vector
// layout (the realigning kernel's slots in a block of kMaxBlockThreads);
// longer ones take the strided layout.
inline constexpr int64_t kRealignMaxChunks = int64_t{kRealignMaxSlots} * kMaxBlockThreads;

// Rows of several warps that one block may hold: each waits on its own
// named barrier, 1 + its index in the block (RowBarrier, row_reduce.cuh),
// and a multiprocessor has 16 (0 is __syncthreads'); a barrier index past
// 15 is an illegal instruction. Rows of one warp use no barrier.
inline constexpr int kMaxMultiWarpRowsPerBlock = 15;

// Dynamic shared memory a plan may ask for. sm_90 lets a block have 227 KB
// (232,448 bytes, static and dynamic together) once the kernel opts in; the
// kernels' static memory (ReduceScratch, about 3.7 KB) takes some of it. The
// launchers raise each kernel's limit to this or to what the device leaves
// after the kernel's static memory, whichever is less (ResidentBlocks,
// launch_common.h); every plan's bytes are checked against it on the CPU
// (launch_plan_test.cc), since a launch asking for more fails at run time.
inline constexpr std::size_t kMaxDynamicSmem = 220 * 1024;

struct KernelPlan {
  Layout layout = Layout::kVector;
  int slots = 1;          // chunks per thread held in registers (compile-time in the kernel)
  int width = 1;          // elements per chunk
  int row_threads = 1;    // threads that share one row, across the whole cluster
  int cluster = 1;        // thread blocks per row (a thread-block cluster when > 1)
  int block_threads = 1;  // threads per block
  int groups = 1;         // rows per block (block_threads / row_threads when cluster == 1)

  // Largest hidden size this plan's register layout holds (streamed: any).
  int64_t Capacity() const;
};

// Elements of `dtype` in 16 bytes.
int VectorWidth(DType dtype);

KernelPlan PlanForward(int64_t hidden, DType x_dtype);
// Backward plans depend on the op too (RMSNorm's 16-bit rows of H =
// 8,200-32,768 take one chunk a thread: launch_plan.cc).
KernelPlan PlanBackward(int64_t hidden, DType x_dtype, NormOp op);

// Backward splits the rows into `units` contiguous ranges of `rows_per_unit`
// rows (the last may be shorter); each unit writes one row of fp32 dgamma and
// dbeta partials, reduced over units in a fixed order afterwards. A function
// of (rows, hidden, dtype, op) only, so results are reproducible run to run
// and machine to machine.
struct BackwardUnits {
  int64_t units = 0;
  int64_t rows_per_unit = 0;
};
BackwardUnits PlanBackwardUnits(int64_t rows, int64_t hidden, DType x_dtype, NormOp op);

// Blocks of `plan`'s backward kernel a multiprocessor holds, from the
// kernels' launch bounds and shared memory (backward_staged_kernel.cuh,
// backward_kernel.cuh): the unit planner's model of occupancy.
int BackwardResidentBlocks(const KernelPlan& plan, DType x_dtype);

// Clusters of `cluster` blocks (in-block rows: 1) that the H200 runs at once
// when each multiprocessor holds `blocks_per_sm` of their blocks. For
// clusters, fewer than kBackwardWaveUnits * blocks_per_sm / cluster: a
// cluster's blocks must share one GPC, and the GPCs' multiprocessor counts
// leave some of them unused (measured with cudaOccupancyMaxActiveClusters:
// 62, not 66, clusters of four at two blocks a multiprocessor; 15, not 16,
// of eight at one). A table of the H200's figures, not a device query, for
// the reason kBackwardWaveUnits gives.
int ActiveClusters(int cluster, int blocks_per_sm);

// The most units PlanBackwardUnits makes for `plan`: one wave,
// ActiveClusters(cluster, BackwardResidentBlocks). Units beyond what runs at
// once start a further wave of few units (fp32 LayerNorm 1024 x 16384 took
// 128 units of 8 rows where 62 clusters fit: three waves, the last of 4).
int64_t BackwardWaveUnits(const KernelPlan& plan, DType x_dtype);

// Backward units aim at one wave: as many as the multiprocessors hold at
// once (BackwardWaveUnits). Each unit
// writes a row of fp32 partials (H x 8 bytes, read back by the column
// reduction), so more units than fit in a wave cost extra waves and partial
// traffic that, for few long rows, exceeds the tensors' own bytes (bf16
// 256 x 65536 took 128 units: 134 MB of partials against 100 MB of x, dy and
// dx). A constant (the H200's multiprocessor count), not read from the
// device, so that the partition does not depend on the GPU model.
inline constexpr int64_t kBackwardWaveUnits = 132;

// The vector-layout backward with one or two chunks a thread
// (BackwardStagedKernel) stages x and dy through shared memory; in-block rows
// share blocks of up to this many threads.
inline constexpr int kBackwardStagedBlockThreads = 768;

// The staged backward's fp32 blocks in clusters (its fp32 launch bound) for
// rows past two chunks a thread in clusters of blocks of kMaxBlockThreads
// (fp32 H = 32,772-65,536).
inline constexpr int kStagedWideBackwardThreads = 1024;

// Rows in the staged backward's shared-memory ring: the one being computed and
// kBackwardStages - 1 loading.
inline constexpr int kBackwardStages = 3;

// Rows whose saved statistics the staged backward's batched kernels
// (kBatchedStatistics) load at once, a lane each: one load a warp for this
// many rows, and a batch boundary that tests reach with few rows.
inline constexpr int kStatisticsBatch = 8;

// Whether the staged backward of `plan` loads saved statistics
// kStatisticsBatch rows at a time, where that measured a gain (H100,
// BENCHMARKS.md, round 36): fp32 rows in clusters of blocks of 1,024
// (LayerNorm 256 x 65536 +0.08 of copy) and RMSNorm's 16-bit rows of two
// chunks a thread in clusters (256 x 65536 +0.04); in the other staged
// kernels it cost up to 0.04.
bool BatchesSavedStatistics(const KernelPlan& plan, DType x_dtype, NormOp op);

inline bool UsesStagedBackward(const KernelPlan& plan) {
  return plan.layout == Layout::kVector && plan.slots <= 2;
}

// Dynamic shared memory of the staged backward: per stage, `slots` 16-byte
// chunks of x and of dy a thread. The same memory holds the in-block combine
// of the dgamma/dbeta partials (W floats a chunk, at most the 32 bytes a chunk
// of x and dy take in one stage) once the ring is done.
constexpr std::size_t BackwardStagedSmemBytes(int block_threads, int slots) {
  return static_cast<std::size_t>(kBackwardStages) * static_cast<std::size_t>(block_threads) *
         static_cast<std::size_t>(slots) * 2 * 16;
}

// The backward's column reduction (stage 2) gives each column
// ColumnReduceSlices(units) threads ("slices"), each adding at most
// kColumnReduceUnitsPerThread units' partials (their loads in flight
// together), at most kColumnReduceMaxSlices of them; a column's sum is its
// slices' in order. A function of the unit count alone, so the order of the
// additions, and the bits, are too. (A fixed 32 slices made few-unit
// launches mostly idle threads: bf16 256 x 65536 has 29 units, and its
// 4,096 blocks of 1,024 threads, one load each, made the partials and their
// reduction cost 25 us, against about 8 us for their 30 MB at the copy's
// rate on the H200.)
inline constexpr int kColumnReduceMaxSlices = 32;
inline constexpr int kColumnReduceUnitsPerThread = 4;
int ColumnReduceSlices(int64_t units);

// Column reductions of long rows take the wide kernel (column_reduce.cu):
// four adjacent columns a thread by 16-byte loads, a quarter of the narrow
// kernels' threads and blocks (one column a thread: at H = 16384, 1,024
// blocks of 1,024 threads). Measured on an H100 (kernels/BENCHMARKS.md,
// round 30): +0.015-0.03 of copy on the backward at H = 16384 and 65536
// (the reduction 10.8 -> 9.1 us at bf16 1024 x 16384), a tie at 8192 and
// -0.01 to -0.03 at H <= 4096, where the narrow grids are one wave already.
// Requires hidden % 4 == 0. The same bits either way (column_reduce.h).
inline constexpr int64_t kWideColumnReduceMinHidden = 16384;
bool WideColumnReduction(int64_t hidden);

// Column reductions of rows of at least kDiscardPartialsMinHidden drop the
// partials they have added from the L2 without writing them back
// (column_reduce.cu, DiscardSlicePartials). Measured on the H200
// (kernels/BENCHMARKS.md, round 48; off / on interleaved twice): the
// backward at H = 4096-65536 by +0.009 of copy on average (13 of 16 shapes
// up; bf16 LayerNorm 16384 0.509 -> 0.530, fp32 LayerNorm 65536 0.79 ->
// 0.81), at H = 768-2049 by -0.006 (10 of 12 down), where the partials are
// a few percent of the bytes. The same bits either way.
inline constexpr int64_t kDiscardPartialsMinHidden = 4096;
bool DiscardsPartials(int64_t hidden);

// Dynamic shared memory of a backward launch of `plan`: the staged kernel's
// ring, or the register kernel's combine of several rows' partials a block.
std::size_t BackwardDynamicSmemBytes(const KernelPlan& plan);

// Backward rows of a hidden size that is not a multiple of the vector width
// (bf16 H = 2049), moved as the aligned 16-byte words they lie across
// (BackwardRealignKernel, backward_realign_kernel.cuh). A row whose first
// element is s elements past a 16-byte boundary covers ceil((s + H) / W)
// words; thread t of the row's team holds words t, t + row_threads, ... in
// its slots, so element e of the row is element (e + s) % W of word
// (e + s) / W. No element is shifted: x and dy are read as whole aligned
// words (a row's two end words too, their neighbours' elements discarded;
// only the tensor's first and last words are read element by element), and
// dx is written as whole words but for a row's two end words, which its
// neighbours share (element by element). The row's sums then run in that
// word order, which depends on s, and each thread's dgamma/dbeta
// accumulators hold the columns of its words, so a block only takes rows of
// one s: rows r and r + period have the same offset (RealignPeriod), and a
// unit is a range of the rows of one offset class k (rows k, k + period,
// ...). The bits are a function of the values and of the rows' offsets from
// a 16-byte boundary (the server's staging buffers start on 256 bytes),
// reproducible run to run, as the issue asks of the backward; the forward
// keeps alignment-free bits (its row order is the logical one).
//
// Row teams are whole warps, not necessarily a power of two (bf16 H = 2049:
// 257 words, 9 warps a row), with one or two words a thread; rows of at
// most 2 x kMaxBlockThreads words. Shorter rows (H <= kBackwardRealignMinHidden)
// and longer ones keep the strided plan (PlanBackward). Each thread's gamma
// and dgamma/dbeta accumulators live in shared memory
// (RealignBackwardSmemBytes), as do the rows in flight (RealignRingBytes;
// 16-bit plans of two words a thread keep the next row in registers).
inline constexpr int64_t kBackwardRealignMinHidden = 256;
inline constexpr int kBackwardRealignMaxSlots = 2;
// Rows of fewer threads share blocks of up to this many.
inline constexpr int kBackwardRealignGroupThreads = 256;

// Aligned words a row of `hidden` elements of `width` a word covers at
// worst (an offset of width - 1 elements).
int64_t RealignWordsPerRow(int64_t hidden, int width);

// The plan of BackwardRealignKernel for (hidden, x dtype), or a plan with
// slots == 0 when the kernel does not serve that hidden size (then
// PlanBackward's plan serves every row). Layout kVector, `slots` words a
// thread, row_threads a multiple of 32, `groups` rows a block.
KernelPlan PlanBackwardRealign(int64_t hidden, DType x_dtype);

// Rows between two rows with the same offset from a 16-byte boundary, when
// consecutive rows are `step` elements of `width` a word apart modulo a
// word (row pitch in bytes % 16 / element size): width / gcd(step, width).
int RealignPeriod(int step, int width);

// The units of a BackwardRealignKernel launch: `period` offset classes of
// `units_per_class` units each (classes with no rows have none), a unit
// `class_rows_per_unit` consecutive rows of its class (a multiple of the
// plan's groups; the last unit of a class may have fewer, or none, and then
// writes zero partials). A function of (rows, plan, period) only.
struct RealignedBackwardUnits {
  int64_t units = 0;
  int64_t units_per_class = 0;
  int64_t class_rows_per_unit = 0;
  int classes = 1;  // offset classes with rows: min(period, rows)
};
RealignedBackwardUnits PlanRealignedBackwardUnits(int64_t rows, int64_t hidden,
                                                  const KernelPlan& plan, int period);

// BackwardRealignKernel's rows in flight: a ring of kRealignStages rows
// (the one computed and kRealignStages - 1 loading) in shared memory, filled
// by each thread's own cp.async copies: per stage its `slots` words of x and
// of dy, and one (mean, rstd) a warp of the block.
inline constexpr int kRealignStages = 3;
// Which BackwardRealignKernel plans keep their rows in flight in the ring:
// all but 16-bit rows of two words a thread, which keep the next row in
// registers (measured slower with the ring: round 21 in BENCHMARKS.md).
constexpr bool RealignUsesRing(int slots, int width) { return !(width == 8 && slots == 2); }
constexpr std::size_t RealignRingBytes(int slots, int block_threads) {
  return static_cast<std::size_t>(kRealignStages) *
         (static_cast<std::size_t>(2 * slots * block_threads) * 16 +
          static_cast<std::size_t>(block_threads / 32) * 8);
}

// Dynamic shared memory of a BackwardRealignKernel launch of `plan`: each
// thread's gamma, dgamma and dbeta words (3 x slots x width floats), the
// ring (RealignRingBytes), and the groups' partials ([groups][hidden]
// floats) when a block has several rows.
std::size_t RealignBackwardSmemBytes(const KernelPlan& plan, int64_t hidden);

// BackwardRealignKernel's registers a thread (__maxnreg__): a multiprocessor
// holds three blocks of 288 threads with one slot (bf16 H = 2049), two with
// two slots (fp32 H = 2049).
inline constexpr int kRealignBackwardRegistersOneSlot = 72;
inline constexpr int kRealignBackwardRegistersTwoSlots = 80;

// Blocks of a BackwardRealignKernel plan a multiprocessor holds, by those
// registers, its threads and its shared memory at `hidden`.
int RealignBackwardResidentBlocks(const KernelPlan& plan, int64_t hidden);

// Threads per block of the streamed (multi-pass) kernels.
inline constexpr int kStreamedThreads = 1024;

// Staged forward plans of rows past the register layouts (Layout::kStaged;
// the shorter staged rows are launch_plan.cc's StagesClusterRow): a cluster
// of kMaxClusterBlocks blocks a row, each thread's chunks in its block's
// shared memory, at most
// kStagedMaxBlockBytes a block (within kMaxDynamicSmem), so a cluster holds
// rows of up to 98,304 chunks (fp32 H = 393,216, 16-bit H = 786,432); longer
// rows are streamed. Blocks of kMaxBlockThreads while a block's chunks take
// at most kStagedTwoBlockBytes (two blocks a multiprocessor), else of
// kStagedWideBlockThreads (one block a multiprocessor either way, and a
// thread's chain of chunks half as long).
inline constexpr std::size_t kStagedMaxBlockBytes = 192 * 1024;
inline constexpr std::size_t kStagedTwoBlockBytes = 96 * 1024;
inline constexpr int kStagedWideBlockThreads = 1024;

// Dynamic shared memory of a staged forward launch: each thread's chunks.
constexpr std::size_t StagedForwardSmemBytes(const KernelPlan& plan) {
  return static_cast<std::size_t>(plan.block_threads) * static_cast<std::size_t>(plan.slots) * 16;
}

}  // namespace normsvc::kernels::detail
