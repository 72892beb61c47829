// Backward for the vector layout (one or two 16-byte chunks a thread), with
// x and dy staged through a shared-memory ring instead of registers.
//
// BackwardRowsKernel (backward_kernel.cuh) keeps the next row's x and dy in
// registers: one row in flight per row team, and 128 registers a thread. Here
// each thread copies its own chunks of x and dy kBackwardStages - 1 rows
// ahead into its own slots of a ring in shared memory (cp.async: no registers
// held), and reads back only what it copied, so the ring needs no barrier,
// only cp.async.wait_group. Rows whose pointers do not allow 16-byte accesses
// fill their slots with ordinary element loads (no overlap, same values), so
// a row's bits never depend on alignment. Saved statistics are loaded one row
// ahead into registers (kBatchedStatistics: kStatisticsBatch rows at a time,
// a lane each).
//
// The op, whether statistics are given, and whether every thread owns all of
// its slots are compile-time in the row loop: the per-element work is what
// the case needs (RMSNorm: no mean, no sum of g, no dbeta). The arithmetic
// is BackwardRowsKernel's reordered for fewer instructions an element (this
// kernel is bound by instruction issue at the in-block shapes): the row sum
// of g * xhat is taken as rstd * sum(g * (x - mean)), and dx = rstd * (g -
// mean_g - xhat * mean_gx) as g * rstd + (xhat * a + b) with a and b formed
// once a row, so its bits are its own (reproducible run to run; the same
// for aligned rows and for rows filled by element loads). The same RowSum
// order, unit partition and group combine. 16-bit dx pairs are rounded by
// the paired conversion, which rounds each element to nearest even exactly
// as the single one does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "async_copy.cuh"
#include "backward_kernel.cuh"
#include "grid_dependency.cuh"
#include "launch_plan.h"

namespace normsvc::kernels::detail {

// W floats rounded to T and packed; 16-bit pairs through the paired
// round-to-nearest conversion (one instruction for two elements).
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> PackFromFloats(const float (&v)[W]) {
  Pack<T, W> pack;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && W % 2 == 0) {
#pragma unroll
    for (int j = 0; j < W; j += 2) {
      reinterpret_cast<__nv_bfloat162*>(&pack)[j / 2] = __floats2bfloat162_rn(v[j], v[j + 1]);
    }
  } else if constexpr (std::is_same_v<T, __half> && W % 2 == 0) {
#pragma unroll
    for (int j = 0; j < W; j += 2) {
      reinterpret_cast<__half2*>(&pack)[j / 2] = __floats2half2_rn(v[j], v[j + 1]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j) pack.e[j] = FromFloat<T>(v[j]);
  }
  return pack;
}

// One thread's part of a unit's rows. `ring`: this thread's first slot;
// slot k of x at stage offset s is ring[s + k * threads], of dy
// ring[s + (V + k) * threads].
template <typename T, int V, int W, bool kFull, bool kLayerNorm, bool kSaved, bool kAligned,
          bool kBatchedStatistics>
__device__ __forceinline__ void StagedBackwardRows(const BackwardParams& p, const RowTeam& team,
                                                   ReduceScratch& scratch, uint4* ring,
                                                   const float (&gamma)[V][W],
                                                   float (&dgamma)[V][W], float (&dbeta)[V][W]) {
  const int threads = static_cast<int>(blockDim.x);
  const int groups = p.shape.groups;
  const int chunks = p.hidden / W;
  const float h = static_cast<float>(p.hidden);
  const int64_t unit = blockIdx.x / team.cluster;
  const int64_t begin = unit * p.rows_per_unit;
  const int64_t end = min(p.rows, begin + p.rows_per_unit);
  const int iterations = static_cast<int>((end - begin + groups - 1) / groups);
  const int stage_size = 2 * V * threads;
  const int ring_size = kBackwardStages * stage_size;
  const int64_t chunk_step = static_cast<int64_t>(team.row_threads) * W;
  const int64_t first_column = static_cast<int64_t>(team.rank) * W;

  bool owns[V];
#pragma unroll
  for (int k = 0; k < V; ++k) owns[k] = kFull || k * team.row_threads + team.rank < chunks;

  // Rows are counted from `begin` in 32 bits (a unit has fewer than 2^31
  // rows); addresses are recomputed from them rather than kept as cursors,
  // which would cost registers the accumulators need.
  const int count = static_cast<int>(end - begin);
  const T* x = static_cast<const T*>(p.x) + begin * p.x_stride + first_column;
  const T* dy = static_cast<const T*>(p.dy) + begin * p.dy_stride + first_column;
  int fill_rel = team.group;  // the row whose copies are issued next
  int fill_at = 0;
  auto fill = [&]() {
    if (fill_rel < count) {
      const T* x_row = x + static_cast<int64_t>(fill_rel) * p.x_stride;
      const T* dy_row = dy + static_cast<int64_t>(fill_rel) * p.dy_stride;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (!owns[k]) continue;
        uint4* x_slot = ring + fill_at + k * threads;
        uint4* dy_slot = ring + fill_at + (V + k) * threads;
        if constexpr (kAligned) {
          CopyAsync16(x_slot, x_row + k * chunk_step);
          CopyAsync16(dy_slot, dy_row + k * chunk_step);
        } else {
          const Pack<T, W> xc = LoadChunk<T, W>(x_row + k * chunk_step, false);
          const Pack<T, W> dyc = LoadChunk<T, W>(dy_row + k * chunk_step, false);
          *x_slot = reinterpret_cast<const uint4&>(xc);
          *dy_slot = reinterpret_cast<const uint4&>(dyc);
        }
      }
    }
    CommitAsyncCopies();  // possibly empty: one group per fill keeps the count right
    fill_rel += groups;
    fill_at = fill_at + stage_size == ring_size ? 0 : fill_at + stage_size;
  };
  // This thread's chunks at stage offset `at`.
  auto read = [&](int at, int k, Pack<T, W>& xc, Pack<T, W>& dyc) {
    reinterpret_cast<uint4&>(xc) = ring[at + k * threads];
    reinterpret_cast<uint4&>(dyc) = ring[at + (V + k) * threads];
  };

#pragma unroll
  for (int s = 0; s < kBackwardStages - 1; ++s) fill();

  T* const dx = static_cast<T*>(p.dx) + begin * p.dx_stride + first_column;
  int rel = team.group;  // this iteration's row, from `begin`
  int use_at = 0;
  float next_mean = 0.0f;
  float next_rstd = 0.0f;
  // kBatchedStatistics (cluster rows: one row an iteration): lane j <
  // kStatisticsBatch of every warp holds the statistics of iteration first +
  // j; each iteration takes its own by a shuffle, and the next batch is
  // loaded during a batch's last row. Values that differ by lane stay in their
  // registers until the shuffle; otherwise the compiler may move the row's
  // value (the same in every lane) into a uniform register as soon as it is
  // loaded, and every row waits for its load (BENCHMARKS.md, round 36).
  const int batch_lane = static_cast<int>(threadIdx.x) & 31;
  auto load_statistics = [&](int first) {
    const int row = first + batch_lane;
    if (batch_lane < kStatisticsBatch && row < count) {
      next_rstd = p.rstd[begin + row];
      if (kLayerNorm) next_mean = p.mean[begin + row];
    }
  };
  if constexpr (kSaved && kBatchedStatistics) {
    load_statistics(0);
  } else if (kSaved && rel < count) {
    next_rstd = p.rstd[begin + rel];
    if (kLayerNorm) next_mean = p.mean[begin + rel];
  }
  for (int it = 0; it < iterations; ++it) {
    fill();
    WaitAsyncCopies<kBackwardStages - 1>();
    const bool active = rel < count;
    const int slot = (it & 1) * 3;
    float mean_hi = 0.0f;
    float mean_lo = 0.0f;
    float rstd;
    if constexpr (kSaved && kBatchedStatistics) {
      // Every thread of the unit runs every iteration (RowSum's contract), so
      // whole warps shuffle.
      const int in_batch = it % kStatisticsBatch;
      rstd = __shfl_sync(0xffffffffu, next_rstd, in_batch);
      if (kLayerNorm) mean_hi = __shfl_sync(0xffffffffu, next_mean, in_batch);
      if (in_batch == kStatisticsBatch - 1) load_statistics(it + 1);
    } else if constexpr (kSaved) {
      mean_hi = next_mean;
      rstd = next_rstd;
      if (rel + groups < count) {
        next_rstd = p.rstd[begin + rel + groups];
        if (kLayerNorm) next_mean = p.mean[begin + rel + groups];
      }
    } else {
      Pack<T, W> xs[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (active && owns[k]) {
          reinterpret_cast<uint4&>(xs[k]) = ring[use_at + k * threads];
        } else {
          ZeroPack(xs[k]);
        }
      }
      const RowStats stats =
          RowStatistics<T, V, W>(xs, chunks, p.hidden, p.epsilon, kLayerNorm, team, scratch, slot);
      mean_hi = stats.mean_hi;
      mean_lo = stats.mean_lo;
      rstd = stats.rstd;
    }

    // The centred value x - mean (x for RMSNorm), whose product with rstd is
    // xhat.
    auto centred = [&](float x) {
      if constexpr (!kLayerNorm) {
        return x;
      } else if constexpr (kSaved) {
        return x - mean_hi;
      } else {
        return (x - mean_hi) - mean_lo;
      }
    };

    // sum(g) (LayerNorm) and sum(g * (x - mean)), g = dy * gamma: rstd
    // scales the second sum once a row rather than every element.
    float sums[kLayerNorm ? 2 : 1] = {};
    if (active) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (!owns[k]) continue;
        Pack<T, W> xc;
        Pack<T, W> dyc;
        read(use_at, k, xc, dyc);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float g = PackElement(dyc, j) * gamma[k][j];
          if constexpr (kLayerNorm) sums[0] += g;
          sums[kLayerNorm ? 1 : 0] = fmaf(g, centred(PackElement(xc, j)), sums[kLayerNorm ? 1 : 0]);
        }
      }
    }
    RowSum<kLayerNorm ? 2 : 1>(sums, team, scratch, slot + 2);
    const float mean_g = kLayerNorm ? sums[0] / h : 0.0f;
    const float mean_gx = sums[kLayerNorm ? 1 : 0] * rstd / h;
    // dx = rstd * (g - mean_g - xhat * mean_gx), as g * rstd + (xhat * a + b).
    const float a = -mean_gx * rstd;
    const float b = -mean_g * rstd;
    if (active) {
      T* const dx_row = dx + static_cast<int64_t>(rel) * p.dx_stride;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (!owns[k]) continue;
        Pack<T, W> xc;
        Pack<T, W> dyc;
        read(use_at, k, xc, dyc);  // again rather than kept across RowSum: fewer live registers
        float out[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float dyv = PackElement(dyc, j);
          const float xhat = centred(PackElement(xc, j)) * rstd;
          const float g = dyv * gamma[k][j];
          out[j] = fmaf(g, rstd, kLayerNorm ? fmaf(xhat, a, b) : xhat * a);
          dgamma[k][j] = fmaf(dyv, xhat, dgamma[k][j]);
          if constexpr (kLayerNorm) dbeta[k][j] += dyv;
        }
        StoreChunk<T, W>(dx_row + k * chunk_step, PackFromFloats<T, W>(out), kAligned);
      }
    }
    rel += groups;
    use_at = use_at + stage_size == ring_size ? 0 : use_at + stage_size;
  }
  WaitAsyncCopies<0>();  // only empty groups can be pending; the ring is reused after
}

// Launch bound: 16-bit rows within a block, in blocks of up to
// kBackwardStagedBlockThreads, get up to 80 registers (their 32 accumulators
// and 16 gamma values). fp32 rows get 64 in blocks of up to
// kStagedWideBackwardThreads: two blocks of 512 a multiprocessor, or one of
// 1,024 (fp32 cluster rows past blocks of 512). 16-bit cluster rows (blocks
// of 512; two chunks a thread, or one for RMSNorm's rows of up to eight
// blocks) get 64 too, so that two of their blocks fit: the two-chunk
// LayerNorm kernels spill a few words, and still measured +0.04 to +0.08 of copy on the H200
// (BENCHMARKS.md, round 12), while the in-block LayerNorm rows lost 0.15 at
// that bound.
template <typename T, bool kCluster>
inline constexpr int kStagedBoundThreads = sizeof(T) == 4
                                               ? kStagedWideBackwardThreads
                                               : (kCluster ? kMaxBlockThreads
                                                           : kBackwardStagedBlockThreads);
template <typename T, bool kCluster>
inline constexpr int kStagedBoundBlocks = sizeof(T) != 4 && kCluster ? 2 : 1;

// kFull: every thread of a row owns all V of its chunks (hidden == V * W *
// row_threads), so no chunk needs a test. kLayerNorm: the op. kSaved: mean
// (LayerNorm) and rstd are given. kAligned: every row of x, dy and dx allows
// 16-byte accesses (BackwardParams::vectorized). One kernel each: inlined
// together in one kernel, the row loops cost spills that none of them needs
// alone, and a run-time alignment test costs predicated instructions in every
// chunk access. kCluster: the plan's rows span a cluster of blocks; the
// kernels of in-block plans compile without the cluster steps of the
// reductions. kBatchedStatistics: saved statistics kStatisticsBatch rows at
// a time (StagedBackwardRows; the plans that take it: BatchesSavedStatistics).
template <typename T, int V, int W, bool kFull, bool kLayerNorm, bool kSaved, bool kAligned,
          bool kCluster, bool kBatchedStatistics = false>
__global__ void __launch_bounds__(kStagedBoundThreads<T, kCluster>, kStagedBoundBlocks<T, kCluster>)
    BackwardStagedKernel(const __grid_constant__ BackwardParams p) {
  static_assert(sizeof(Pack<T, W>) == 16, "a slot holds one 16-byte chunk");
  // Launched early (programmatic dependent launch): waits for the previous
  // grid before any global access; the column reduction (launched early too)
  // may be scheduled once every block has started, and waits for this grid
  // to finish before reading partials.
  BeginDependentGrid();
  __shared__ ReduceScratch scratch;
  if constexpr (kCluster) BeginClusterExchanges(scratch);
  // [stage][x V | dy V][thread] (BackwardStagedSmemBytes in launch_plan.h).
  extern __shared__ __align__(128) uint4 ring[];
  const RowShape& shape = p.shape;
  const RowTeam team = MakeTeamFor<kCluster>(shape);
  const int64_t unit = blockIdx.x / team.cluster;
  const int chunks = p.hidden / W;

  float dgamma[V][W];
  float dbeta[V][W];
  float gamma[V][W];
#pragma unroll
  for (int k = 0; k < V; ++k) {
#pragma unroll
    for (int j = 0; j < W; ++j) dgamma[k][j] = dbeta[k][j] = 0.0f;
    if (kFull || k * team.row_threads + team.rank < chunks) {
      LoadGamma<T, W>(p, static_cast<int64_t>(k * team.row_threads + team.rank) * W,
                      p.vectorized != 0, gamma[k]);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) gamma[k][j] = 1.0f;
    }
  }
  static_assert(!kBatchedStatistics || kCluster,
                "batched statistics: rows of one a unit's iteration");
  StagedBackwardRows<T, V, W, kFull, kLayerNorm, kSaved, kAligned, kBatchedStatistics>(
      p, team, scratch, ring + threadIdx.x, gamma, dgamma, dbeta);

  // One row of partials per unit, as BackwardRowsKernel writes it; the ring
  // is done (StagedBackwardRows waited for every copy) and holds the combine.
  float* const partials[2] = {p.dgamma_partial, kLayerNorm ? p.dbeta_partial : nullptr};
  WriteUnitPartials<V, W>(partials, unit * static_cast<int64_t>(p.hidden), p.hidden, team,
                          shape.groups, reinterpret_cast<float*>(ring), dgamma, dbeta);
  if constexpr (kCluster) ClusterSync();
}

}  // namespace normsvc::kernels::detail
