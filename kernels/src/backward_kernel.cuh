// Backward LayerNorm / RMSNorm kernels (BackwardArgs in types.h has the
// contract). Instantiated once per x dtype in backward_<dtype>.cu.
//
// Stage 1 (BackwardRowsKernel / BackwardStreamedKernel): the rows are split
// into units of consecutive rows (launch_plan.h); a unit is one block (whose
// row groups take rows round-robin) or one cluster. Per row:
//   xhat = (x - mean) * rstd, g = dy * gamma,
//   dx = rstd * ((g - sum(g)/H) - xhat * sum(g*xhat)/H)      (RMSNorm: no sum(g) term)
// and each thread accumulates dy*xhat and dy for its own columns over its
// rows. A unit then writes one row of fp32 partials (groups of a block are
// combined in shared memory in group order).
// Stage 2 (column_reduce.h): dgamma/dbeta = sum of the partials over
// units in a fixed order. No atomics: bitwise reproducible.
#pragma once

#include "device_access.cuh"
#include "forward_kernel.cuh"
#include "grid_dependency.cuh"
#include "kernel_params.h"
#include "row_reduce.cuh"

namespace normsvc::kernels::detail {

template <typename T, int W>
__device__ __forceinline__ void LoadGamma(const BackwardParams& p, int64_t index, bool vectorized,
                                          float (&g)[W]) {
  if (p.gamma != nullptr) {
    LoadParams<T, W>(p.gamma, p.param_dtype, index, vectorized, g);
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j) g[j] = 1.0f;
  }
}

// Writes a unit's dgamma/dbeta accumulators as its row of partials
// (`partial_row` = unit * hidden; a null entry of `partials` is skipped). One
// row a block: each thread stores its own columns. Several rows a block
// (`groups` > 1): the groups' accumulators are added in shared memory
// `combine` ([groups][row_threads * V * W] floats) in group order first.
// Every thread of the block calls it (it has barriers when groups > 1).
template <int V, int W>
__device__ __forceinline__ void WriteUnitPartials(float* const (&partials)[2], int64_t partial_row,
                                                  int hidden, const RowTeam& team, int groups,
                                                  float* combine, const float (&dgamma)[V][W],
                                                  const float (&dbeta)[V][W]) {
  const int chunks = hidden / W;
  if (groups == 1) {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      if (partials[which] == nullptr) continue;
      const float(&sums)[V][W] = which == 0 ? dgamma : dbeta;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int chunk = k * team.row_threads + team.rank;
        if constexpr (W == 8) {
          // A warp whose 32 chunks are all in the row stores its 256 floats
          // as two runs of 512 bytes: lane l's store i is float4 32 i + l of
          // them, half (l & 1) of chunk 16 i + l / 2, fetched by shuffles.
          // (Each lane storing its own two float4s has every store of the
          // warp touch every other 16 bytes: twice the L2 sectors.) Row
          // threads are whole warps here (one row a block, or a cluster's).
          if (__all_sync(0xffffffffu, chunk < chunks)) {
            const int lane = static_cast<int>(threadIdx.x) & 31;
            float4* const warp_dst = reinterpret_cast<float4*>(
                partials[which] + partial_row + static_cast<int64_t>(chunk - lane) * W);
            const float4 halves[2] = {make_float4(sums[k][0], sums[k][1], sums[k][2], sums[k][3]),
                                      make_float4(sums[k][4], sums[k][5], sums[k][6], sums[k][7])};
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const int source = 16 * i + (lane >> 1);
              float4 v[2];
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                v[h].x = __shfl_sync(0xffffffffu, halves[h].x, source);
                v[h].y = __shfl_sync(0xffffffffu, halves[h].y, source);
                v[h].z = __shfl_sync(0xffffffffu, halves[h].z, source);
                v[h].w = __shfl_sync(0xffffffffu, halves[h].w, source);
              }
              warp_dst[32 * i + lane] = (lane & 1) != 0 ? v[1] : v[0];
            }
            continue;
          }
        }
        if (chunk >= chunks) continue;
        float* dst = partials[which] + partial_row + static_cast<int64_t>(chunk) * W;
        if constexpr (W % 4 == 0) {
          // A partial row starts at a multiple of W floats of a 256-byte
          // aligned workspace: 16-byte stores.
#pragma unroll
          for (int q = 0; q < W / 4; ++q) {
            reinterpret_cast<float4*>(dst)[q] = make_float4(sums[k][4 * q], sums[k][4 * q + 1],
                                                            sums[k][4 * q + 2], sums[k][4 * q + 3]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < W; ++j) dst[j] = sums[k][j];
        }
      }
    }
    return;
  }
  const int capacity = team.row_threads * V * W;
  for (int which = 0; which < 2; ++which) {
    if (partials[which] == nullptr) continue;
    __syncthreads();  // the previous users of `combine` are done
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        combine[team.group * capacity + chunk * W + j] = which == 0 ? dgamma[k][j] : dbeta[k][j];
      }
    }
    __syncthreads();
    for (int column = threadIdx.x; column < hidden; column += blockDim.x) {
      float total = combine[column];
      for (int gi = 1; gi < groups; ++gi) total += combine[gi * capacity + column];
      partials[which][partial_row + column] = total;
    }
  }
}

// Persistent over the unit's rows: the next row's x and dy (and saved
// statistics) are loaded while the current row is processed. kCluster: the
// plan's rows span a cluster of blocks (the kernels of in-block plans compile
// without the cluster steps of the reductions).
template <typename T, int V, int W, bool kCluster>
__global__ void __launch_bounds__(512, 1)
    BackwardRowsKernel(const __grid_constant__ BackwardParams p) {
  BeginDependentGrid();  // as BackwardStagedKernel
  __shared__ ReduceScratch scratch;
  // [groups][row_threads * V * W] when groups > 1
  extern __shared__ __align__(128) float combine[];
  if constexpr (kCluster) BeginClusterExchanges(scratch);
  const RowShape& shape = p.shape;
  const RowTeam team = MakeTeamFor<kCluster>(shape);
  const int64_t unit = blockIdx.x / team.cluster;
  const bool layer_norm = p.op == static_cast<uint8_t>(NormOp::kLayerNorm);
  const bool vectorized = p.vectorized != 0;
  const int chunks = p.hidden / W;
  const float h = static_cast<float>(p.hidden);
  const int64_t begin = unit * p.rows_per_unit;
  const int64_t end = min(p.rows, begin + p.rows_per_unit);
  const int iterations = static_cast<int>((end - begin + shape.groups - 1) / shape.groups);

  float dgamma[V][W];
  float dbeta[V][W];
#pragma unroll
  for (int k = 0; k < V; ++k) {
#pragma unroll
    for (int j = 0; j < W; ++j) dgamma[k][j] = dbeta[k][j] = 0.0f;
  }

  // gamma of this thread's columns, loaded once (every row uses the same).
  float gamma[V][W];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int chunk = k * team.row_threads + team.rank;
    if (chunk < chunks) {
      LoadGamma<T, W>(p, static_cast<int64_t>(chunk) * W, vectorized, gamma[k]);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) gamma[k][j] = 1.0f;
    }
  }

  Pack<T, W> next_x[V];
  Pack<T, W> next_dy[V];
  float next_mean = 0.0f;
  float next_rstd = 0.0f;
  auto fetch = [&](int it) {
    const int64_t row = begin + static_cast<int64_t>(it) * shape.groups + team.group;
    const bool active = row < end;
    const T* x_row = static_cast<const T*>(p.x) + row * p.x_stride;
    const T* dy_row = static_cast<const T*>(p.dy) + row * p.dy_stride;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (active && chunk < chunks) {
        next_x[k] = LoadChunk<T, W>(x_row + static_cast<int64_t>(chunk) * W, vectorized);
        next_dy[k] = LoadChunk<T, W>(dy_row + static_cast<int64_t>(chunk) * W, vectorized);
      } else {
        ZeroPack(next_x[k]);
        ZeroPack(next_dy[k]);
      }
    }
    if (p.rstd != nullptr && active) {
      next_rstd = p.rstd[row];
      if (layer_norm) next_mean = p.mean[row];
    }
  };
  if (iterations > 0) fetch(0);

  for (int it = 0; it < iterations; ++it) {
    const int64_t row = begin + static_cast<int64_t>(it) * shape.groups + team.group;
    const bool active = row < end;
    const int slot = (it & 1) * 3;
    Pack<T, W> x[V];
    Pack<T, W> dy[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      x[k] = next_x[k];
      dy[k] = next_dy[k];
    }
    RowStats stats;
    stats.mean_hi = next_mean;
    stats.rstd = next_rstd;
    if (it + 1 < iterations) fetch(it + 1);
    if (p.rstd == nullptr) {
      stats =
          RowStatistics<T, V, W>(x, chunks, p.hidden, p.epsilon, layer_norm, team, scratch, slot);
    }
    float sums[2] = {0.0f, 0.0f};  // sum(g), sum(g * xhat)
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (chunk < chunks) {
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float xhat = ((PackElement(x[k], j) - stats.mean_hi) - stats.mean_lo) * stats.rstd;
          const float g = PackElement(dy[k], j) * gamma[k][j];
          sums[0] += g;
          sums[1] = fmaf(g, xhat, sums[1]);
        }
      }
    }
    RowSum<2>(sums, team, scratch, slot + 2);
    const float mean_g = layer_norm ? sums[0] / h : 0.0f;
    const float mean_gx = sums[1] / h;
    if (active) {
      T* dx_row = static_cast<T*>(p.dx) + row * p.dx_stride;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int chunk = k * team.row_threads + team.rank;
        if (chunk < chunks) {
          Pack<T, W> dx;
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float dyv = PackElement(dy[k], j);
            const float xhat =
                ((PackElement(x[k], j) - stats.mean_hi) - stats.mean_lo) * stats.rstd;
            const float g = dyv * gamma[k][j];
            dx.e[j] = FromFloat<T>(fmaf(-xhat, mean_gx, g - mean_g) * stats.rstd);
            dgamma[k][j] = fmaf(dyv, xhat, dgamma[k][j]);
            dbeta[k][j] += dyv;
          }
          StoreChunk<T, W>(dx_row + static_cast<int64_t>(chunk) * W, dx, vectorized);
        }
      }
    }
  }

  // One row of partials per unit.
  float* const partials[2] = {p.dgamma_partial, p.dbeta_partial};
  WriteUnitPartials<V, W>(partials, unit * static_cast<int64_t>(p.hidden), p.hidden, team,
                          shape.groups, combine, dgamma, dbeta);
  if constexpr (kCluster) ClusterSync();
}

// Rows too long for registers: one block of 1024 threads per unit; x and dy
// are re-read from global memory for each pass, partials accumulate in the
// unit's own row of the workspace (each column owned by one thread).
template <typename T>
__global__ void __launch_bounds__(1024)
    BackwardStreamedKernel(const __grid_constant__ BackwardParams p) {
  BeginDependentGrid();  // as BackwardStagedKernel
  __shared__ ReduceScratch scratch;
  RowTeam team;
  team.row_threads = static_cast<int>(blockDim.x);
  team.cluster = 1;
  team.group = 0;
  team.rank = static_cast<int>(threadIdx.x);
  const int threads = team.row_threads;
  const int64_t unit = blockIdx.x;
  const bool layer_norm = p.op == static_cast<uint8_t>(NormOp::kLayerNorm);
  const float h = static_cast<float>(p.hidden);
  const int64_t begin = unit * p.rows_per_unit;
  const int64_t end = min(p.rows, begin + p.rows_per_unit);
  float* dgamma = p.dgamma_partial ? p.dgamma_partial + unit * p.hidden : nullptr;
  float* dbeta = p.dbeta_partial ? p.dbeta_partial + unit * p.hidden : nullptr;

  for (int64_t row = begin; row < end; ++row) {
    const int slot = static_cast<int>((row - begin) & 1) * 3;
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    const T* dy = static_cast<const T*>(p.dy) + row * p.dy_stride;
    RowStats stats;
    if (p.rstd != nullptr) {
      stats.rstd = p.rstd[row];
      if (layer_norm) stats.mean_hi = p.mean[row];
    } else {
      if (layer_norm) {
        float sum[1] = {0.0f};
        for (int e = team.rank; e < p.hidden; e += threads) sum[0] += ToFloat(x[e]);
        RowSum<1>(sum, team, scratch, slot);
        stats.mean_hi = sum[0] / h;
      }
      float moments[2] = {0.0f, 0.0f};
      for (int e = team.rank; e < p.hidden; e += threads) {
        const float d = ToFloat(x[e]) - stats.mean_hi;
        moments[0] += d;
        moments[1] = fmaf(d, d, moments[1]);
      }
      RowSum<2>(moments, team, scratch, slot + 1);
      if (layer_norm) {
        stats.mean_lo = moments[0] / h;
        stats.rstd = RstdFromVariance(moments[1] / h - stats.mean_lo * stats.mean_lo, p.epsilon);
      } else {
        stats.rstd = RstdFromVariance(moments[1] / h, p.epsilon);
      }
    }
    float sums[2] = {0.0f, 0.0f};
    for (int e = team.rank; e < p.hidden; e += threads) {
      float gamma[1];
      LoadGamma<T, 1>(p, e, false, gamma);
      const float xhat = ((ToFloat(x[e]) - stats.mean_hi) - stats.mean_lo) * stats.rstd;
      const float g = ToFloat(dy[e]) * gamma[0];
      sums[0] += g;
      sums[1] = fmaf(g, xhat, sums[1]);
    }
    RowSum<2>(sums, team, scratch, slot + 2);
    const float mean_g = layer_norm ? sums[0] / h : 0.0f;
    const float mean_gx = sums[1] / h;
    T* dx = static_cast<T*>(p.dx) + row * p.dx_stride;
    const bool first = row == begin;
    for (int e = team.rank; e < p.hidden; e += threads) {
      float gamma[1];
      LoadGamma<T, 1>(p, e, false, gamma);
      const float dyv = ToFloat(dy[e]);
      const float xhat = ((ToFloat(x[e]) - stats.mean_hi) - stats.mean_lo) * stats.rstd;
      const float g = dyv * gamma[0];
      dx[e] = FromFloat<T>(fmaf(-xhat, mean_gx, g - mean_g) * stats.rstd);
      if (dgamma) dgamma[e] = first ? dyv * xhat : fmaf(dyv, xhat, dgamma[e]);
      if (dbeta) dbeta[e] = first ? dyv : dbeta[e] + dyv;
    }
  }
}

}  // namespace normsvc::kernels::detail
