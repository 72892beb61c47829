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
//   3. block totals read through distributed shared memory, added in rank
//      order, when the row spans a cluster.
// Contract: every thread of a row calls RowSum the same number of times with
// the same slot (the calls contain barriers: the row's own named barrier
// 1 + group in a block of several rows, __syncthreads and cluster barriers for
// a row that spans a cluster); a slot's memory is rewritten only after a
// later call's barrier, so callers that loop alternate between two sets of
// slots. Named barriers 1..groups are RowSum's; kernels use barrier 0.
#pragma once

#include <cooperative_groups.h>

#include "kernel_params.h"

namespace normsvc::kernels::detail {

inline constexpr int kReduceSlots = 6;

// Moments of a part of a row about a pivot, the state LayerNorm's statistic
// merges (RowMergeMoments): `count` elements, `sum` and `squares` the sums of
// (x - pivot) and (x - pivot)^2 over them.
struct PivotMoments {
  float pivot;
  float sum;
  float squares;
  float count;
};

struct alignas(16) ReduceScratch {
  float warp[kReduceSlots][32][2];
  float block[kReduceSlots][2];
  // RowMergeMoments' exchanges, one per row: a slot for each parity of the
  // callers' row loops (MomentSlot).
  PivotMoments warp_moments[2][32];
  PivotMoments block_moments[2];
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

  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch.block[slot][i] = v[i];
  }
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float total = cluster.map_shared_rank(&scratch.block[slot][0], 0)[i];
    for (int r = 1; r < team.cluster; ++r) {
      total += cluster.map_shared_rank(&scratch.block[slot][0], r)[i];
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
// For a row that spans a cluster, then the blocks' moments through
// distributed shared memory: the weighted mean of their pivots, then each
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

  if (threadIdx.x == 0) scratch.block_moments[slot] = m;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  float weighted_sum = 0.0f;
  float count = 0.0f;
#pragma unroll 1
  for (int r = 0; r < team.cluster; ++r) {
    const PivotMoments& block = *cluster.map_shared_rank(&scratch.block_moments[slot], r);
    weighted_sum = __fmaf_rn(block.count, block.pivot, weighted_sum);
    count = __fadd_rn(count, block.count);
  }
  PivotMoments total;
  total.pivot = WeightedPivot(weighted_sum, count);
  total.sum = 0.0f;
  total.squares = 0.0f;
  total.count = count;
#pragma unroll 1
  for (int r = 0; r < team.cluster; ++r) {
    const PivotMoments block =
        RecenterMoments(*cluster.map_shared_rank(&scratch.block_moments[slot], r), total.pivot);
    total.sum = __fadd_rn(total.sum, block.sum);
    total.squares = __fadd_rn(total.squares, block.squares);
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
