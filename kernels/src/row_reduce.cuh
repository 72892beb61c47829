// Deterministic sums over the threads that share a row.
//
// A row belongs to `row_threads` threads: a power-of-two part of a warp, a
// group of whole warps inside one block, or all the threads of a cluster of
// blocks. Every thread of the row gets the same sum, computed in an order
// fixed by the row shape alone:
//   1. butterfly (xor) shuffles within min(row_threads, 32) lanes; both lanes
//      of each exchange add the same two values, so all lanes agree;
//   2. warp totals in shared memory, added by butterfly (xor) shuffles over
//      as many lanes as the row has warps (every lane the same bits);
//   3. block totals sent to every block of the cluster (st.async into each
//      block's shared memory, ExchangeAcrossCluster) and added in rank
//      order, when the row spans a cluster.
// Contract: every thread of a row calls RowSum the same number of times with
// the same slot (the calls contain barriers: the row's own named barrier
// 1 + group in a block of several rows, __syncthreads and the slot's mbarrier
// for a row that spans a cluster); a slot's memory is rewritten only after a
// later call's barrier, so callers that loop alternate between two sets of
// slots. Named barriers 1..groups are RowSum's; kernels use barrier 0.
// Rows of fewer than 32 threads share a warp, and step 1's shuffles take the
// whole warp: there every thread of the warp calls RowSum together, whatever
// its row's data, so a call that only some rows need (a statistic's second
// pass taken on a condition of the row's values) must be made by the whole
// warp, each row keeping or ignoring its own result. A full-mask shuffle that
// not every lane reaches is undefined behaviour; round 26's variant did that
// and its GPU tests hung (kernels/BENCHMARKS.md).
#pragma once

#include <cooperative_groups.h>

#include "kernel_params.h"
#include "launch_plan.h"

namespace normsvc::kernels::detail {

inline constexpr int kReduceSlots = 6;

// Moments of a part of a row about a pivot, the state LayerNorm's statistic
// merges (RowMergeMoments): `count` elements, `sum` and `squares` the sums of
// (x - pivot) and (x - pivot)^2 over them.
struct alignas(16) PivotMoments {
  float pivot;
  float sum;
  float squares;
  float count;
};

// One exchange between the blocks of a cluster (ExchangeAcrossCluster):
// block r's 16 bytes arrive in received[r] by st.async, and `barrier` (an
// mbarrier, one arrival a warp) completes its phase when every block's
// have arrived and every warp of this block has asked for them.
struct alignas(16) ClusterExchange {
  float4 received[kMaxClusterBlocks];
  uint64_t barrier;
};

// RowSum's cluster exchanges use channels 0..kReduceSlots-1 (its slots),
// RowMergeMoments' the two after them (MomentSlot).
inline constexpr int kExchangeChannels = kReduceSlots + 2;

// 128-byte aligned, so that its size is a whole number of 128-byte lines
// and the dynamic shared memory after it (the staged kernels' row images,
// the parameter slots) starts on a line: a warp's 16-byte accesses to
// consecutive slots then touch 4 lines, not 5. Measured on the H200
// (BENCHMARKS.md, round 11): with the scratch 80 bytes off a line, every
// in-block staged backward shape lost 0.10-0.13 of copy.
struct alignas(128) ReduceScratch {
  float warp[kReduceSlots][32][2];
  // RowMergeMoments' exchanges, one per row: a slot for each parity of the
  // callers' row loops (MomentSlot).
  PivotMoments warp_moments[2][32];
  ClusterExchange exchanges[kExchangeChannels];
};

struct RowTeam {
  int row_threads;  // threads sharing the row (across the cluster)
  int rank;         // this thread's index among them
  int cluster;      // blocks per row
  int group;        // this row's index among the rows of the block
};

// The team of the calling thread for rows laid out as `shape` says. In-block
// row teams are powers of two (launch_plan.h), so shifts and masks place a
// thread; a cluster's block rank is the hardware's.
// For launches whose rows lie within a block (shape.cluster == 1): the
// cluster is the constant 1, so RowSum and the statistics compile without
// their cluster steps.
__device__ __forceinline__ RowTeam MakeBlockTeam(const RowShape& shape) {
  RowTeam team;
  team.row_threads = shape.row_threads;
  team.cluster = 1;
  const int shift = __ffs(shape.row_threads) - 1;
  team.group = static_cast<int>(threadIdx.x) >> shift;
  team.rank = static_cast<int>(threadIdx.x) & (shape.row_threads - 1);
  return team;
}

// For launches whose rows span a cluster (shape.cluster > 1): one row a
// cluster, so the in-block steps for several rows a block compile away.
__device__ __forceinline__ RowTeam MakeClusterTeam(const RowShape& shape) {
  RowTeam team;
  team.row_threads = shape.row_threads;
  team.cluster = shape.cluster;
  const int rank_of_block = static_cast<int>(cooperative_groups::this_cluster().block_rank());
  team.rank = rank_of_block * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
  team.group = 0;
  return team;
}

__device__ __forceinline__ RowTeam MakeTeam(const RowShape& shape) {
  return shape.cluster == 1 ? MakeBlockTeam(shape) : MakeClusterTeam(shape);
}

// The team for kernels compiled for one kind of plan (kCluster: rows that
// span a cluster; else rows within a block).
template <bool kCluster>
__device__ __forceinline__ RowTeam MakeTeamFor(const RowShape& shape) {
  if constexpr (kCluster) {
    return MakeClusterTeam(shape);
  } else {
    return MakeBlockTeam(shape);
  }
}

// Rows of a persistent launch: a block (or cluster) takes row groups
// unit, unit + units, unit + 2 units, ... where a unit is a block (of
// `groups` rows) or a cluster (of one row). The iteration count is the same
// for every thread of the unit, as the barriers in RowSum require.
struct RowSchedule {
  int64_t unit;
  int64_t units;
  int iterations;
  int groups;

  __device__ __forceinline__ int64_t FirstRowOf(int iteration) const {
    return (unit + static_cast<int64_t>(iteration) * units) * groups;
  }
};

// `row_groups`: ForwardParams::row_groups. The divisions are 32-bit unless
// a launch has 2^31 row groups or more.
__device__ __forceinline__ RowSchedule MakeSchedule(const RowShape& shape, int64_t row_groups) {
  RowSchedule s;
  s.groups = shape.groups;
  const unsigned cluster = static_cast<unsigned>(shape.cluster);
  s.unit = cluster > 1 ? blockIdx.x / cluster : blockIdx.x;
  s.units = cluster > 1 ? gridDim.x / cluster : gridDim.x;
  if (row_groups <= s.unit) {
    s.iterations = 0;
  } else if (row_groups <= INT32_MAX) {
    const unsigned left = static_cast<unsigned>(row_groups - s.unit);
    const unsigned units = static_cast<unsigned>(s.units);
    s.iterations = static_cast<int>((left + units - 1) / units);
  } else {
    s.iterations = static_cast<int>((row_groups - s.unit + s.units - 1) / s.units);
  }
  return s;
}

__device__ __forceinline__ void ClusterSync() { cooperative_groups::this_cluster().sync(); }

// Step 1 of RowSum: the sums over the row's lanes of this warp (all of them
// for a row of a warp or more), the same bits in every lane.
template <int N>
__device__ __forceinline__ void WarpSum(float (&v)[N], const RowTeam& team) {
  if (team.row_threads >= 32) {
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
    }
  } else {
    for (int offset = 1; offset < team.row_threads; offset <<= 1) {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
    }
  }
}

// Waits until every warp of the calling thread's row has reached this point:
// the row's own named barrier in a block of several rows, else the block's.
__device__ __forceinline__ void RowBarrier(const RowTeam& team) {
  if (team.cluster == 1) {
    // Only this row's warps read its warp totals: the rows of a block wait
    // on their own barriers (1 + group; 0 is __syncthreads') instead of on
    // each other.
    asm volatile("bar.sync %0, %1;" ::"r"(1 + team.group), "r"(team.row_threads) : "memory");
  } else {
    __syncthreads();
  }
}

// The row's warps in this block: a power of two (in-block rows are powers of
// two warps, launch_plan.h; a cluster's block is a power of two warps).
__device__ __forceinline__ int WarpsPerBlockRow(const RowTeam& team) {
  const int block_row_threads = team.cluster > 1 ? static_cast<int>(blockDim.x) : team.row_threads;
  return block_row_threads >> 5;
}

// The exchanges between the blocks of a cluster go through mbarriers and
// st.async (asynchronous stores into a remote block's shared memory that
// complete on its mbarrier), not through cluster barriers: a cluster
// barrier's release orders every earlier global store of the thread (a
// fence at GPU scope before the arrival), which in a row loop waits for the
// previous row's output to reach memory. Measured on the H200 (BENCHMARKS.md,
// round 11).
//
// Kernels whose rows may span a cluster call BeginClusterExchanges once,
// before their first row, with every thread of the block: it initializes the
// block's mbarriers (one arrival a warp) and waits until every block of the
// cluster has, so that no st.async reaches an uninitialized one.
__device__ __forceinline__ void BeginClusterExchanges(ReduceScratch& scratch) {
  if (threadIdx.x == 0) {
    const uint32_t warps = blockDim.x / 32;
#pragma unroll
    for (int c = 0; c < kExchangeChannels; ++c) {
      const uint32_t barrier =
          static_cast<uint32_t>(__cvta_generic_to_shared(&scratch.exchanges[c].barrier));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier), "r"(warps) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  ClusterSync();
}

// Gives block r's `value` (the same in every lane of each block) to lane r of
// every warp of the cluster, r < team.cluster; other lanes get zeros. Lanes
// r of warp 0 store the block's value into block r's received[own rank] by
// st.async; each warp's lane 0 arrives on the local mbarrier (thread 0 also
// announces the cluster's bytes), and every thread waits for the phase its
// warp's arrival belongs to. Contract (RowSum's): every thread of the block
// calls it, and a channel is reused only after an exchange on another
// channel, which no block passes before every block has read this one.
__device__ __forceinline__ float4 ExchangeAcrossCluster(ClusterExchange& channel,
                                                        const float4& value, const RowTeam& team) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const uint32_t barrier = static_cast<uint32_t>(__cvta_generic_to_shared(&channel.barrier));
  if (warp == 0 && lane < team.cluster) {
    const uint32_t own_rank = cooperative_groups::this_cluster().block_rank();
    const uint32_t slot =
        static_cast<uint32_t>(__cvta_generic_to_shared(&channel.received[own_rank]));
    uint32_t remote_slot;
    uint32_t remote_barrier;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(slot), "r"(lane));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote_barrier)
                 : "r"(barrier), "r"(lane));
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
        "[%5];" ::"r"(remote_slot),
        "r"(__float_as_uint(value.x)), "r"(__float_as_uint(value.y)), "r"(__float_as_uint(value.z)),
        "r"(__float_as_uint(value.w)), "r"(remote_barrier)
        : "memory");
  }
  uint64_t state = 0;
  if (lane == 0) {
    if (warp == 0) {
      const uint32_t bytes = static_cast<uint32_t>(team.cluster) * sizeof(float4);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                   : "=l"(state)
                   : "r"(barrier), "r"(bytes)
                   : "memory");
    } else {
      asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];"
                   : "=l"(state)
                   : "r"(barrier)
                   : "memory");
    }
  }
  state = __shfl_sync(0xffffffffu, state, 0);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred complete;\n\t"
        "mbarrier.try_wait.acquire.cluster.shared::cta.b64 complete, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, complete;\n\t}"
        : "=r"(done)
        : "r"(barrier), "l"(state)
        : "memory");
  } while (done == 0);
  return lane < team.cluster ? channel.received[lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

template <int N>
__device__ __forceinline__ void RowSum(float (&v)[N], const RowTeam& team, ReduceScratch& scratch,
                                       int slot) {
  static_assert(N >= 1 && N <= 2, "RowSum adds one or two values");
  WarpSum<N>(v, team);
  if (team.row_threads <= 32) return;

  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch.warp[slot][warp][i] = v[i];
  }
  RowBarrier(team);
  const int warps_per_row = WarpsPerBlockRow(team);
  // A cluster's block and a streamed row's block start at warp 0.
  const int first_warp = warp & ~(warps_per_row - 1);
  // Every group of warps_per_row lanes takes the row's warp totals in warp
  // order and adds them by butterfly: each group does the same additions on
  // the same values, so every lane of every warp of the row gets the same bits.
  const int lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
  for (int i = 0; i < N; ++i)
    v[i] = scratch.warp[slot][first_warp + (lane & (warps_per_row - 1))][i];
  for (int offset = 1; offset < warps_per_row; offset <<= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
  }
  if (team.cluster == 1) return;

  // Lane r of each warp gets block r's totals (one exchange, every block's
  // in flight together); the warp then adds them in rank order by shuffles,
  // so every lane of the cluster gets the same bits.
  const float4 block = ExchangeAcrossCluster(
      scratch.exchanges[slot], make_float4(v[0], N > 1 ? v[N - 1] : 0.0f, 0.0f, 0.0f), team);
  const float mine[2] = {block.x, block.y};
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float total = __shfl_sync(0xffffffffu, mine[i], 0);
#pragma unroll
    for (int r = 1; r < kMaxClusterBlocks; ++r) {
      if (r < team.cluster) total += __shfl_sync(0xffffffffu, mine[i], r);
    }
    v[i] = total;
  }
}

// `part`'s moments about another pivot. Exact algebra: over the part's
// elements, with delta = part.pivot - pivot,
//   sum(x - pivot)     = part.sum + part.count * delta
//   sum((x - pivot)^2) = part.squares + delta * (2 part.sum + part.count * delta).
// Written with explicit round-to-nearest intrinsics (no contraction chosen by
// the compiler), so every caller gets the same bits for the same values.
__device__ __forceinline__ PivotMoments RecenterMoments(const PivotMoments& part, float pivot) {
  const float delta = __fsub_rn(part.pivot, pivot);
  PivotMoments m;
  m.pivot = pivot;
  m.sum = __fmaf_rn(part.count, delta, part.sum);
  m.squares =
      __fmaf_rn(delta, __fmaf_rn(part.count, delta, __fadd_rn(part.sum, part.sum)), part.squares);
  m.count = part.count;
  return m;
}

// The moment slot of a row loop's first RowSum slot: the loops alternate
// between two sets of slots (forward 0-1 and 2-3, backward 0-2 and 3-5), one
// exchange of moments each.
__device__ __forceinline__ int MomentSlot(int row_slot) { return row_slot >= 2 ? 1 : 0; }

// The pivot the parts' moments are recentred on: the count-weighted mean of
// their pivots (their fp32 means), so close to the row's mean (within the
// rounding of fp32 sums) that the final variance suffers no cancellation, as
// in the two-pass form.
__device__ __forceinline__ float WeightedPivot(float weighted_sum, float count) {
  return count > 0.0f ? __fdiv_rn(weighted_sum, count) : 0.0f;
}

// The moments of the whole row from each warp's (`warp`: the same value in
// every lane of the warp), in one exchange: the warps' moments through shared
// memory and one barrier; the count-weighted mean of the warps' pivots by
// butterfly (WeightedPivot); each warp's moments recentred on it and added
// by butterfly in warp order (RowSum's step 2: the same bits in every lane).
// For a row that spans a cluster, then the blocks' moments through one
// ExchangeAcrossCluster: the weighted mean of their pivots, then each
// recentred on it and added, both in rank order. Rows of more than one warp;
// empty parts (count 0, pivot 0, sums 0) add nothing. `row_slot`: the
// caller's first RowSum slot of the row (MomentSlot), with RowSum's contract.
__device__ __forceinline__ PivotMoments RowMergeMoments(const PivotMoments& warp,
                                                        const RowTeam& team, ReduceScratch& scratch,
                                                        int row_slot) {
  const int slot = MomentSlot(row_slot);
  const int warp_index = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (lane == 0) scratch.warp_moments[slot][warp_index] = warp;
  RowBarrier(team);
  const int warps_per_row = WarpsPerBlockRow(team);
  const int first_warp = warp_index & ~(warps_per_row - 1);
  const PivotMoments own = scratch.warp_moments[slot][first_warp + (lane & (warps_per_row - 1))];
  float weighted[2] = {__fmul_rn(own.count, own.pivot), own.count};
  for (int offset = 1; offset < warps_per_row; offset <<= 1) {
#pragma unroll
    for (int i = 0; i < 2; ++i) weighted[i] += __shfl_xor_sync(0xffffffffu, weighted[i], offset);
  }
  PivotMoments m = RecenterMoments(own, WeightedPivot(weighted[0], weighted[1]));
  m.count = weighted[1];
  for (int offset = 1; offset < warps_per_row; offset <<= 1) {
    m.sum += __shfl_xor_sync(0xffffffffu, m.sum, offset);
    m.squares += __shfl_xor_sync(0xffffffffu, m.squares, offset);
  }
  if (team.cluster == 1) return m;

  // Lane r of each warp gets block r's moments (one exchange); the weighted
  // pivot and the sums are then taken in rank order by shuffles, and each
  // lane recentres its own block's moments: the same operations on the same
  // values in every lane.
  const float4 block = ExchangeAcrossCluster(scratch.exchanges[kReduceSlots + slot],
                                             make_float4(m.pivot, m.sum, m.squares, m.count), team);
  const PivotMoments mine{block.x, block.y, block.z, block.w};
  float weighted_sum = 0.0f;
  float count = 0.0f;
#pragma unroll
  for (int r = 0; r < kMaxClusterBlocks; ++r) {
    if (r < team.cluster) {
      const float block_count = __shfl_sync(0xffffffffu, mine.count, r);
      const float block_pivot = __shfl_sync(0xffffffffu, mine.pivot, r);
      weighted_sum = __fmaf_rn(block_count, block_pivot, weighted_sum);
      count = __fadd_rn(count, block_count);
    }
  }
  PivotMoments total;
  total.pivot = WeightedPivot(weighted_sum, count);
  total.sum = 0.0f;
  total.squares = 0.0f;
  total.count = count;
  const PivotMoments centred = RecenterMoments(mine, total.pivot);
#pragma unroll
  for (int r = 0; r < kMaxClusterBlocks; ++r) {
    if (r < team.cluster) {
      total.sum = __fadd_rn(total.sum, __shfl_sync(0xffffffffu, centred.sum, r));
      total.squares = __fadd_rn(total.squares, __shfl_sync(0xffffffffu, centred.squares, r));
    }
  }
  return total;
}

// Row statistics from per-thread partial sums, in the order every path uses.
// LayerNorm: mean = mean_hi + mean_lo, where mean_hi is the fp32 mean of the
// first pass and mean_lo the mean of (v - mean_hi) from the second (the
// corrected two-pass algorithm): rows with a large mean and a small spread
// keep their precision because v - mean_hi is exact there.
struct RowStats {
  float mean_hi = 0.0f;
  float mean_lo = 0.0f;
  float rstd = 0.0f;
};

// LayerNorm's variance from the second pass: sum(d^2)/H - mean_lo^2, with
// one rounding (an explicit FMA: the same bits in every kernel that uses it).
__device__ __forceinline__ float LayerNormVariance(float sum_squares, float mean_lo, float h) {
  return __fmaf_rn(-mean_lo, mean_lo, __fdiv_rn(sum_squares, h));
}

__device__ __forceinline__ float RstdFromVariance(float variance, float epsilon) {
  // A negative rounding residue becomes 0; NaN stays NaN (no fmaxf).
  variance = variance < 0.0f ? 0.0f : variance;
  return 1.0f / sqrtf(variance + epsilon);
}

}  // namespace normsvc::kernels::detail
