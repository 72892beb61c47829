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

struct alignas(16) ReduceScratch {
  float warp[kReduceSlots][32][2];
  float block[kReduceSlots][2];
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
__device__ __forceinline__ RowTeam MakeTeam(const RowShape& shape) {
  RowTeam team;
  team.row_threads = shape.row_threads;
  team.cluster = shape.cluster;
  if (shape.cluster > 1) {
    const int rank_of_block = static_cast<int>(cooperative_groups::this_cluster().block_rank());
    team.rank = rank_of_block * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
    team.group = 0;
  } else {
    const int shift = __ffs(shape.row_threads) - 1;
    team.group = static_cast<int>(threadIdx.x) >> shift;
    team.rank = static_cast<int>(threadIdx.x) & (shape.row_threads - 1);
  }
  return team;
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

template <int N>
__device__ __forceinline__ void RowSum(float (&v)[N], const RowTeam& team, ReduceScratch& scratch,
                                       int slot) {
  static_assert(N >= 1 && N <= 2, "RowSum adds one or two values");
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
  if (team.row_threads <= 32) return;

  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch.warp[slot][warp][i] = v[i];
  }
  if (team.cluster == 1) {
    // Only this row's warps read its warp totals: the rows of a block wait
    // on their own barriers (1 + group; 0 is __syncthreads') instead of on
    // each other.
    asm volatile("bar.sync %0, %1;" ::"r"(1 + team.group), "r"(team.row_threads) : "memory");
  } else {
    __syncthreads();
  }
  const int block_row_threads = team.cluster > 1 ? static_cast<int>(blockDim.x) : team.row_threads;
  const int warps_per_row = block_row_threads >> 5;
  // In-block rows are powers of two warps (launch_plan.h); a cluster's block
  // and a streamed row's block are powers of two warps starting at warp 0.
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
