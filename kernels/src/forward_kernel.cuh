// Forward LayerNorm / RMSNorm kernels. Instantiated once per x dtype in
// forward_<dtype>.cu; launched by forward_launch.cu.
//
// Per row (ForwardSegment in types.h has the contract):
//   v = round_T(x + residual)                      (kept in registers, as T)
//   LayerNorm: mean_hi = sum(v)/H; d = v - mean_hi; mean_lo = sum(d)/H;
//              var = sum(d^2)/H - mean_lo^2;
//              y = fma(v - mean_hi, rstd, -(mean_lo * rstd))
//              (rows that span a cluster: mean_hi is the count-weighted mean
//              of the warps' fp32 means and the sums are merged from each
//              warp's, RowMergeMoments)
//   RMSNorm:   var = sum(v^2)/H; y = v * rstd
//   rstd = 1/sqrt(var + eps) (epsilon inside the square root), all in fp32.
// Sums are taken per thread in slot order, then by RowSum (row_reduce.cuh).
#pragma once

#include "device_access.cuh"
#include "grid_dependency.cuh"
#include "kernel_params.h"
#include "param_cache.cuh"
#include "row_reduce.cuh"
#include "segment_lookup.cuh"

namespace normsvc::kernels::detail {

template <typename T, int W>
__device__ __forceinline__ float PackSum(const Pack<T, W>& pack) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < W; ++j) s += PackElement(pack, j);
  return s;
}

// One row's pointers, resolved once (typed, row offset applied).
template <typename T>
struct RowPointers {
  const T* x;
  const T* residual;
  T* residual_out;
  const void* gamma;
  const void* beta;
  void* out;
  uint8_t out_dtype;
  uint8_t param_dtype;
};

template <typename T>
__device__ __forceinline__ RowPointers<T> ResolveRow(const DeviceSegment& s, int64_t row) {
  RowPointers<T> r;
  r.x = static_cast<const T*>(s.x) + row * s.x_stride;
  r.residual = s.residual ? static_cast<const T*>(s.residual) + row * s.residual_stride : nullptr;
  r.residual_out =
      s.residual_out ? static_cast<T*>(s.residual_out) + row * s.residual_out_stride : nullptr;
  r.gamma = s.gamma;
  r.beta = s.beta;
  r.out = static_cast<char*>(s.out) +
          row * s.out_stride * static_cast<int64_t>(DTypeSize(static_cast<DType>(s.out_dtype)));
  r.out_dtype = s.out_dtype;
  r.param_dtype = s.param_dtype;
  return r;
}

// round_T(x + residual), element by element: the fused residual add of
// every forward kernel (the sum is what residual_out receives and what is
// normalized).
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> AddResidual(const Pack<T, W>& x, const Pack<T, W>& residual) {
  Pack<T, W> sum;
#pragma unroll
  for (int j = 0; j < W; ++j) sum.e[j] = FromFloat<T>(ToFloat(x.e[j]) + ToFloat(residual.e[j]));
  return sum;
}

// Loads the chunk at element `index` of x, adds the residual, rounds to T and
// writes residual_out; returns the rounded sum.
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> LoadInput(const RowPointers<T>& r, int64_t index,
                                                bool vectorized, bool write_residual_out) {
  Pack<T, W> v = LoadChunk<T, W>(r.x + index, vectorized);
  if (r.residual != nullptr) {
    v = AddResidual(v, LoadChunk<T, W>(r.residual + index, vectorized));
    if (write_residual_out && r.residual_out != nullptr) {
      StoreChunk<T, W>(r.residual_out + index, v, vectorized);
    }
  }
  return v;
}

// The arithmetic every forward path shares, written with explicit
// round-to-nearest intrinsics so that no path lets the compiler contract a
// different pair of operations into an FMA: the specialized kernel
// (forward_lean_kernel.cuh) and this general one give the same bits for the
// same row, which keeps aligned and misaligned copies of a row identical.
// LayerNorm: (v - mean_hi) * rstd - mean_lo * rstd in one FMA. v - mean_hi
// is exact or nearly so for the elements near the mean (the same difference
// the second pass sums), and mean_lo (the fp32 mean's residual) is so small
// that the rounding of mean_lo * rstd lies far below the result's, so the
// FMA's one rounding is as accurate as subtracting mean_lo first, with one
// operation an element fewer. The row's correction is a function of its
// statistics alone (hoisted out of the element loops).
__device__ __forceinline__ float RowShift(const RowStats& stats) {
  return -__fmul_rn(stats.mean_lo, stats.rstd);
}

__device__ __forceinline__ float NormalizedValue(float value, const RowStats& stats,
                                                 bool layer_norm) {
  return layer_norm ? __fmaf_rn(__fsub_rn(value, stats.mean_hi), stats.rstd, RowShift(stats))
                    : __fmul_rn(value, stats.rstd);
}

// y * gamma + beta with one rounding when both are present.
__device__ __forceinline__ float ApplyAffine(float y, float g, float b, bool has_gamma,
                                             bool has_beta) {
  if (has_gamma && has_beta) return __fmaf_rn(y, g, b);
  if (has_gamma) return __fmul_rn(y, g);
  if (has_beta) return __fadd_rn(y, b);
  return y;
}

// Normalizes the chunk at element `index` and writes it to out.
template <typename T, int W>
__device__ __forceinline__ void WriteOutput(const RowPointers<T>& r, int64_t index,
                                            const Pack<T, W>& v, const RowStats& stats,
                                            bool layer_norm, bool vectorized) {
  float g[W] = {};
  float b[W] = {};
  if (r.gamma != nullptr) LoadParams<T, W>(r.gamma, r.param_dtype, index, vectorized, g);
  if (r.beta != nullptr) LoadParams<T, W>(r.beta, r.param_dtype, index, vectorized, b);
  float y[W];
#pragma unroll
  for (int j = 0; j < W; ++j) {
    y[j] = ApplyAffine(NormalizedValue(PackElement(v, j), stats, layer_norm), g[j], b[j],
                       r.gamma != nullptr, r.beta != nullptr);
  }
  StoreOutput<W>(r.out, r.out_dtype, index, y, vectorized);
}

// WriteOutput with gamma and beta from the thread's parameter cache (slot k),
// for a chunk of which the first `elements` lie in the row.
template <typename T, int W>
__device__ __forceinline__ void WriteOutputCached(const RowPointers<T>& r, int64_t index,
                                                  const Pack<T, W>& v, const RowStats& stats,
                                                  bool layer_norm, bool vectorized,
                                                  const ParamCache& cache, int k, int elements) {
  float g[W] = {};
  float b[W] = {};
  if (r.gamma != nullptr) ReadCachedParams<T, W>(cache, k, 0, g);
  if (r.beta != nullptr) ReadCachedParams<T, W>(cache, k, 1, b);
  float y[W];
#pragma unroll
  for (int j = 0; j < W; ++j) {
    y[j] = ApplyAffine(NormalizedValue(PackElement(v, j), stats, layer_norm), g[j], b[j],
                       r.gamma != nullptr, r.beta != nullptr);
  }
  StoreOutput<W>(r.out, r.out_dtype, index, y, vectorized, elements);
}

// The statistics from the row totals of the second pass, the sums of d and
// of d * d with d = x - mean_hi (the rows of at most one warp end here).
__device__ __forceinline__ void FinishRowStatistics(const float (&moments)[2], float h,
                                                    float epsilon, bool layer_norm,
                                                    RowStats& stats) {
  if (layer_norm) {
    stats.mean_lo = moments[0] / h;
    stats.rstd = RstdFromVariance(LayerNormVariance(moments[1], stats.mean_lo, h), epsilon);
  } else {
    stats.rstd = RstdFromVariance(moments[1] / h, epsilon);
  }
}

// LayerNorm's statistics of a row that spans a cluster of blocks, with one
// exchange between warps (and one between blocks) instead of two: each warp
// takes the two passes over its own elements by shuffles (its pivot: its
// fp32 mean, then the sums of d and d^2 with d = x - pivot), and
// RowMergeMoments combines the warps' and blocks' moments exactly about the
// weighted mean of their pivots. The row's mean is then pivot + sum/H
// (mean_hi + mean_lo) and its variance squares/H - mean_lo^2, as in the
// two-pass form, with as little cancellation. Measured on the H200
// (BENCHMARKS.md, round 10): it pays where the exchanges are cluster
// barriers; for rows within a block it costs what the barrier it saves does.
// `thread_sum` is the sum of the thread's elements in its slot order,
// `thread_count` how many it holds; `second_pass(pivot, sum, squares)` adds
// d and d^2 over them.
template <typename SecondPass>
__device__ __forceinline__ RowStats ClusterLayerNormStatistics(float thread_sum, int thread_count,
                                                               float h, float epsilon,
                                                               const RowTeam& team,
                                                               ReduceScratch& scratch, int slot,
                                                               SecondPass&& second_pass) {
  float warp_sum[1] = {thread_sum};
  WarpSum<1>(warp_sum, team);
  const unsigned count = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(thread_count));
  PivotMoments warp;
  warp.count = static_cast<float>(count);
  // Any value near the warp's mean serves as its pivot (the moments about it
  // are exact to rounding), so the fast division: no slow path to call while
  // the row is in registers.
  warp.pivot = count > 0 ? __fdividef(warp_sum[0], warp.count) : 0.0f;
  float moments[2] = {0.0f, 0.0f};
  second_pass(warp.pivot, moments[0], moments[1]);
  WarpSum<2>(moments, team);
  warp.sum = moments[0];
  warp.squares = moments[1];
  const PivotMoments row = RowMergeMoments(warp, team, scratch, slot);
  RowStats stats;
  stats.mean_hi = row.pivot;
  stats.mean_lo = row.sum / h;
  stats.rstd = RstdFromVariance(LayerNormVariance(row.squares, stats.mean_lo, h), epsilon);
  return stats;
}

// The statistics of a row held in registers as V chunks of W elements,
// chunk k of this thread at k * team.row_threads + team.rank; chunks at or
// past `chunks` are zero and ignored. kTail: the last chunk may be partial
// (hidden % W != 0); its missing elements are zero in `v` and left out of
// the sums (a zero adds nothing to the first pass and to RMSNorm's squares;
// the second pass skips them). LayerNorm: two passes, each ended by RowSum,
// for rows within a block; ClusterLayerNormStatistics for rows that span a
// cluster. RMSNorm: one pass.
//
// RowStatisticsOf takes the chunks from `chunk_at(k)` (slot k's pack, by
// value or reference) instead of an array, for kernels that derive them
// (forward_realign_kernel.cuh); the same operations in the same order.
template <typename T, int V, int W, bool kTail, typename ChunkAt>
__device__ __forceinline__ RowStats RowStatisticsOf(ChunkAt&& chunk_at, int chunks, int hidden,
                                                    float epsilon, bool layer_norm,
                                                    const RowTeam& team, ReduceScratch& scratch,
                                                    int first_slot) {
  RowStats stats;
  const float h = static_cast<float>(hidden);
  if (!layer_norm) {
    float squares[1] = {0.0f};
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (k * team.row_threads + team.rank < chunks) {
        const Pack<T, W> chunk = chunk_at(k);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float x = PackElement(chunk, j);
          squares[0] = fmaf(x, x, squares[0]);
        }
      }
    }
    RowSum<1>(squares, team, scratch, first_slot + 1);
    stats.rstd = RstdFromVariance(squares[0] / h, epsilon);
    return stats;
  }
  float sum[1] = {0.0f};
#pragma unroll
  for (int k = 0; k < V; ++k) sum[0] += PackSum<T, W>(chunk_at(k));
  const auto second_pass = [&](float pivot, float& d_sum, float& d_squares) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (chunk < chunks) {
        const int elements = kTail ? ChunkElements<W>(chunk, hidden) : W;
        const Pack<T, W> values = chunk_at(k);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          if (kTail && j >= elements) continue;
          const float d = __fsub_rn(PackElement(values, j), pivot);
          d_sum += d;
          d_squares = fmaf(d, d, d_squares);
        }
      }
    }
  };
  if (team.cluster > 1) {
    int thread_elements = 0;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (chunk < chunks) thread_elements += kTail ? ChunkElements<W>(chunk, hidden) : W;
    }
    return ClusterLayerNormStatistics(sum[0], thread_elements, h, epsilon, team, scratch,
                                      first_slot, second_pass);
  }
  RowSum<1>(sum, team, scratch, first_slot);
  stats.mean_hi = sum[0] / h;
  float moments[2] = {0.0f, 0.0f};
  second_pass(stats.mean_hi, moments[0], moments[1]);
  RowSum<2>(moments, team, scratch, first_slot + 1);
  FinishRowStatistics(moments, h, epsilon, layer_norm, stats);
  return stats;
}

template <typename T, int V, int W, bool kTail = false>
__device__ __forceinline__ RowStats RowStatistics(const Pack<T, W> (&v)[V], int chunks, int hidden,
                                                  float epsilon, bool layer_norm,
                                                  const RowTeam& team, ReduceScratch& scratch,
                                                  int first_slot) {
  return RowStatisticsOf<T, V, W, kTail>([&](int k) -> const Pack<T, W>& { return v[k]; }, chunks,
                                         hidden, epsilon, layer_norm, team, scratch, first_slot);
}

// The row a group works on at one iteration of the persistent loop.
struct RowRef {
  const DeviceSegment* segment;
  int64_t row;  // within the segment
  bool active;  // false for the padding rows of the last block
};

template <typename T, int V, int W>
__device__ __forceinline__ RowRef FetchRow(const ForwardParams& p, const RowSchedule& schedule,
                                           const RowTeam& team, int iteration, Pack<T, W> (&x)[V]) {
  const int64_t block_row = schedule.FirstRowOf(iteration);
  const int64_t row = block_row + team.group;
  RowRef ref;
  ref.active = row < p.total_rows;
  ref.segment = LocateSegment(p, ref.active ? row : p.total_rows - 1, &ref.row);
  const DeviceSegment& s = *ref.segment;
  const int chunks = (s.hidden + W - 1) / W;
  const T* x_row = static_cast<const T*>(s.x) + ref.row * s.x_stride;
  const bool vectorized = s.vectorized != 0;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int chunk = k * team.row_threads + team.rank;
    if (ref.active && chunk < chunks) {
      x[k] = LoadPartialChunk<T, W>(x_row + static_cast<int64_t>(chunk) * W, vectorized,
                                    ChunkElements<W>(chunk, s.hidden));
    } else {
      ZeroPack(x[k]);
    }
  }
  return ref;
}

// Normalizes one row whose x chunks are in registers.
template <typename T, int V, int W>
__device__ __forceinline__ void NormalizeRow(const RowRef& ref, Pack<T, W> (&v)[V],
                                             const RowTeam& team, ReduceScratch& scratch,
                                             int first_slot, ParamCache& cache) {
  const DeviceSegment& s = *ref.segment;
  // Issued before the statistics so its loads overlap theirs.
  RefreshParamCache<T, V, W>(cache, s, team.row_threads, team.rank);
  const bool layer_norm = s.op == static_cast<uint8_t>(NormOp::kLayerNorm);
  const bool vectorized = s.vectorized != 0;
  const int chunks = (s.hidden + W - 1) / W;
  const RowPointers<T> r = ResolveRow<T>(s, ref.row);
  if (r.residual != nullptr) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (ref.active && chunk < chunks) {
        const int64_t index = static_cast<int64_t>(chunk) * W;
        const int elements = ChunkElements<W>(chunk, s.hidden);
        v[k] = AddResidual(v[k], LoadPartialChunk<T, W>(r.residual + index, vectorized, elements));
        if (r.residual_out != nullptr) {
          StorePartialChunk<T, W>(r.residual_out + index, v[k], vectorized, elements);
        }
      }
    }
  }
  // Plans with a partial last chunk (launch_plan.h) come here too.
  const RowStats stats = RowStatistics<T, V, W, true>(v, chunks, s.hidden, s.epsilon, layer_norm,
                                                      team, scratch, first_slot);
  if (!ref.active) return;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int chunk = k * team.row_threads + team.rank;
    if (chunk < chunks) {
      WriteOutputCached<T, W>(r, static_cast<int64_t>(chunk) * W, v[k], stats, layer_norm,
                              vectorized, cache, k, ChunkElements<W>(chunk, s.hidden));
    }
  }
  if (team.rank == 0) {
    if (s.mean != nullptr) s.mean[ref.row] = stats.mean_hi + stats.mean_lo;
    if (s.rstd != nullptr) s.rstd[ref.row] = stats.rstd;
  }
}

// Persistent: each block (or cluster) loops over its rows, loading the next
// row's x while it normalizes the current one, so that loads stay in flight.
// One block of 512 per SM at most: a thread holds two rows' chunks.
template <typename T, int V, int W>
#ifdef NORMSVC_FORWARD_MAX_REGISTERS
// Tuning experiment: a register cap instead of the launch bound (more warps
// per SM against possible spills); the benchmark can build both.
__global__ void __maxnreg__(NORMSVC_FORWARD_MAX_REGISTERS)
#else
__global__ void __launch_bounds__(512, 1)
#endif
    ForwardRowsKernel(const __grid_constant__ ForwardParams p) {
  BeginDependentGrid();
  __shared__ ReduceScratch scratch;
  if (p.shape.cluster > 1) BeginClusterExchanges(scratch);
  extern __shared__ __align__(128) uint8_t param_cache_bytes[];  // ParamCacheBytes(V, W, ...)
  ParamCache cache = EmptyParamCache(param_cache_bytes);
  const RowTeam team = MakeTeam(p.shape);
  const RowSchedule schedule = MakeSchedule(p.shape, p.row_groups);
  Pack<T, W> next[V];
  RowRef next_ref = FetchRow<T, V, W>(p, schedule, team, 0, next);
  for (int it = 0; it < schedule.iterations; ++it) {
    Pack<T, W> v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = next[k];
    const RowRef ref = next_ref;
    if (it + 1 < schedule.iterations) next_ref = FetchRow<T, V, W>(p, schedule, team, it + 1, next);
    NormalizeRow<T, V, W>(ref, v, team, scratch, (it & 1) * 2, cache);
  }
  // No block of a cluster may exit while another may still access its shared memory.
  if (p.shape.cluster > 1) ClusterSync();
}

// Rows too long for registers: one block of 1024 threads per row, three
// passes over global memory (element e belongs to thread e % 1024).
template <typename T>
__global__ void __launch_bounds__(1024)
    ForwardStreamedKernel(const __grid_constant__ ForwardParams p) {
  BeginDependentGrid();
  __shared__ ReduceScratch scratch;
  const RowTeam team = MakeTeam(p.shape);
  const int64_t row = blockIdx.x;
  int64_t local_row = 0;
  const DeviceSegment& s = *LocateSegment(p, row, &local_row);
  const bool layer_norm = s.op == static_cast<uint8_t>(NormOp::kLayerNorm);
  const int threads = team.row_threads;
  const float h = static_cast<float>(s.hidden);
  const RowPointers<T> r = ResolveRow<T>(s, local_row);
  // Recomputing v in each pass gives the same value; only the last pass
  // writes residual_out.

  RowStats stats;
  if (layer_norm) {
    float sum[1] = {0.0f};
    for (int e = team.rank; e < s.hidden; e += threads) {
      sum[0] += ToFloat(LoadInput<T, 1>(r, e, false, false).e[0]);
    }
    RowSum<1>(sum, team, scratch, 0);
    stats.mean_hi = sum[0] / h;
  }
  float moments[2] = {0.0f, 0.0f};
  for (int e = team.rank; e < s.hidden; e += threads) {
    const float d = ToFloat(LoadInput<T, 1>(r, e, false, false).e[0]) - stats.mean_hi;
    moments[0] += d;
    moments[1] = fmaf(d, d, moments[1]);
  }
  RowSum<2>(moments, team, scratch, 1);
  if (layer_norm) {
    stats.mean_lo = moments[0] / h;
    stats.rstd = RstdFromVariance(LayerNormVariance(moments[1], stats.mean_lo, h), s.epsilon);
  } else {
    stats.rstd = RstdFromVariance(moments[1] / h, s.epsilon);
  }
  for (int e = team.rank; e < s.hidden; e += threads) {
    const Pack<T, 1> v = LoadInput<T, 1>(r, e, false, true);
    WriteOutput<T, 1>(r, e, v, stats, layer_norm, false);
  }
  if (team.rank == 0) {
    if (s.mean != nullptr) s.mean[local_row] = stats.mean_hi + stats.mean_lo;
    if (s.rstd != nullptr) s.rstd[local_row] = stats.rstd;
  }
}

}  // namespace normsvc::kernels::detail
