// Forward kernel for the common case, specialized at compile time.
//
// Covers segments whose output dtype is the x dtype T and whose gamma/beta
// have dtype P (T or fp32), in the vector layout with 16-byte accesses (every
// pointer and row pitch of the segment aligned) or in the strided layout
// (element-wise by construction). Everything else takes ForwardRowsKernel
// (forward_kernel.cuh).
//
// What the general kernel decides per chunk is decided here once: the op and
// the single-segment case per launch (one copy of the row loop each), the
// presence of gamma/beta and of the residual per row (outside the element
// loops), dtypes and access widths at compile time. A single segment is read
// straight from the kernel parameters, never through a pointer.
//
// The arithmetic is the general kernel's, operation for operation
// (RowStatistics, NormalizedValue, ApplyAffine), so a row gives the same bits
// on either path: aligned and misaligned copies of a row agree, and the path
// a row takes depends only on its own segment (batch invariance).
#pragma once

#include "forward_kernel.cuh"

namespace normsvc::kernels::detail {

// One row's operands, typed.
template <typename T, typename P>
struct FastRow {
  const T* x;
  const T* residual;
  T* residual_out;
  T* out;
  const P* gamma;
  const P* beta;
  float* mean;
  float* rstd;
  int64_t row;  // within the segment
  int hidden;
  float epsilon;
};

template <typename T, typename P>
__device__ __forceinline__ FastRow<T, P> MakeFastRow(const DeviceSegment& s, int64_t row) {
  FastRow<T, P> r;
  r.x = static_cast<const T*>(s.x) + row * s.x_stride;
  r.residual = s.residual ? static_cast<const T*>(s.residual) + row * s.residual_stride : nullptr;
  r.residual_out =
      s.residual_out ? static_cast<T*>(s.residual_out) + row * s.residual_out_stride : nullptr;
  r.out = static_cast<T*>(s.out) + row * s.out_stride;
  r.gamma = static_cast<const P*>(s.gamma);
  r.beta = static_cast<const P*>(s.beta);
  r.mean = s.mean;
  r.rstd = s.rstd;
  r.row = row;
  r.hidden = s.hidden;
  r.epsilon = s.epsilon;
  return r;
}

template <typename T, int W>
__device__ __forceinline__ Pack<T, W> LoadFastChunk(const T* p) {
  Pack<T, W> pack;
  if constexpr (W == 1) {
    pack.e[0] = LoadStreaming(p);
  } else {
    LoadPackVector<T, W>(p, pack);
  }
  return pack;
}

template <typename T, int W>
__device__ __forceinline__ void StoreFastChunk(T* p, const Pack<T, W>& pack) {
  if constexpr (W == 1) {
    StoreStreaming(p, pack.e[0]);
  } else {
    StorePackVector<T, W>(p, pack);
  }
}

// Per-thread gamma/beta slots in dynamic shared memory, raw in dtype P, laid
// out as ParamCacheBytes(V, W, sizeof(P), blockDim.x) describes; reloaded
// only when a row's segment has other parameters. Each thread reads only the
// slots it wrote: no barrier.
template <typename P, int V, int W>
struct FastParamCache {
  P* base;
  const P* gamma;
  const P* beta;
  int hidden;

  __device__ __forceinline__ P* Slot(int k, int which) const {
    return base +
           (static_cast<int>((k * 2 + which) * blockDim.x) + static_cast<int>(threadIdx.x)) * W;
  }

  __device__ __forceinline__ void Refresh(const P* g, const P* b, int h, const RowTeam& team) {
    if (g == gamma && b == beta && h == hidden) return;
    gamma = g;
    beta = b;
    hidden = h;
    const int chunks = h / W;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (chunk >= chunks) continue;
      const int64_t index = static_cast<int64_t>(chunk) * W;
      if (g != nullptr) CopyPack(g + index, Slot(k, 0));
      if (b != nullptr) CopyPack(b + index, Slot(k, 1));
    }
  }

  static __device__ __forceinline__ void CopyPack(const P* src, P* dst) {
    constexpr int kBytes = static_cast<int>(sizeof(P)) * W;
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q) {
        reinterpret_cast<uint4*>(dst)[q] = __ldg(reinterpret_cast<const uint4*>(src) + q);
      }
    } else {
      static_assert(W == 1, "vector parameter packs are multiples of 16 bytes");
      dst[0] = __ldg(src);
    }
  }

  static __device__ __forceinline__ Pack<P, W> Read(const P* slot) {
    Pack<P, W> pack;
    constexpr int kBytes = static_cast<int>(sizeof(P)) * W;
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q) {
        reinterpret_cast<uint4*>(&pack)[q] = reinterpret_cast<const uint4*>(slot)[q];
      }
    } else {
      pack.e[0] = slot[0];
    }
    return pack;
  }
};

// The row a group works on at one iteration (multi-segment launches carry
// the segment; single-segment launches read it from the parameters).
struct FastRef {
  const DeviceSegment* segment;
  int64_t row;  // within the segment
  bool active;  // false for the padding rows of the last block
};

template <typename T, int V, int W, bool kSingle>
__device__ __forceinline__ FastRef FetchFastRow(const ForwardParams& p, const RowSchedule& schedule,
                                                const RowTeam& team, int iteration,
                                                Pack<T, W> (&x)[V]) {
  const int64_t block_row = schedule.FirstRowOf(iteration);
  const int64_t row = block_row + team.group;
  FastRef ref;
  ref.active = row < p.total_rows;
  const T* x_row;
  int hidden;
  if constexpr (kSingle) {
    ref.segment = nullptr;
    ref.row = row;
    x_row = static_cast<const T*>(p.single.x) + row * p.single.x_stride;
    hidden = p.single.hidden;
  } else {
    ref.segment =
        LocateSegment(p, block_row, ref.active ? row : p.total_rows - 1, iteration & 1, &ref.row);
    x_row = static_cast<const T*>(ref.segment->x) + ref.row * ref.segment->x_stride;
    hidden = ref.segment->hidden;
  }
  const int chunks = hidden / W;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int chunk = k * team.row_threads + team.rank;
    if (ref.active && chunk < chunks) {
      x[k] = LoadFastChunk<T, W>(x_row + static_cast<int64_t>(chunk) * W);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) x[k].e[j] = FromFloat<T>(0.0f);
    }
  }
  return ref;
}

// Normalizes and writes this thread's chunks of one row.
template <typename T, typename P, int V, int W, bool kLayerNorm, bool kGamma, bool kBeta>
__device__ __forceinline__ void WriteFastRow(const FastRow<T, P>& r, const Pack<T, W> (&v)[V],
                                             const RowStats& stats,
                                             const FastParamCache<P, V, W>& cache,
                                             const RowTeam& team, int chunks) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int chunk = k * team.row_threads + team.rank;
    if (chunk >= chunks) continue;
    Pack<P, W> g = {};
    Pack<P, W> b = {};
    if constexpr (kGamma) g = FastParamCache<P, V, W>::Read(cache.Slot(k, 0));
    if constexpr (kBeta) b = FastParamCache<P, V, W>::Read(cache.Slot(k, 1));
    Pack<T, W> y;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float n = NormalizedValue(ToFloat(v[k].e[j]), stats, kLayerNorm);
      y.e[j] = FromFloat<T>(ApplyAffine(n, kGamma ? ToFloat(g.e[j]) : 0.0f,
                                        kBeta ? ToFloat(b.e[j]) : 0.0f, kGamma, kBeta));
    }
    StoreFastChunk<T, W>(r.out + static_cast<int64_t>(chunk) * W, y);
  }
}

template <typename T, typename P, int V, int W, bool kLayerNorm, bool kSingle>
__device__ __forceinline__ void FastRows(const ForwardParams& p, ReduceScratch& scratch,
                                         uint8_t* cache_bytes) {
  const RowTeam team = MakeTeam(p.shape);
  const RowSchedule schedule = MakeSchedule(p.shape, p.total_rows);
  FastParamCache<P, V, W> cache{reinterpret_cast<P*>(cache_bytes), nullptr, nullptr, -1};
  if constexpr (kSingle) {
    cache.Refresh(static_cast<const P*>(p.single.gamma), static_cast<const P*>(p.single.beta),
                  p.single.hidden, team);
  }
  Pack<T, W> next[V];
  FastRef next_ref = FetchFastRow<T, V, W, kSingle>(p, schedule, team, 0, next);
  for (int it = 0; it < schedule.iterations; ++it) {
    Pack<T, W> v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = next[k];
    const FastRef ref = next_ref;
    if (it + 1 < schedule.iterations) {
      next_ref = FetchFastRow<T, V, W, kSingle>(p, schedule, team, it + 1, next);
    }
    FastRow<T, P> r;
    if constexpr (kSingle) {
      r = MakeFastRow<T, P>(p.single, ref.row);
    } else {
      r = MakeFastRow<T, P>(*ref.segment, ref.row);
      cache.Refresh(r.gamma, r.beta, r.hidden, team);
    }
    const int chunks = r.hidden / W;
    if (r.residual != nullptr) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int chunk = k * team.row_threads + team.rank;
        if (ref.active && chunk < chunks) {
          const int64_t index = static_cast<int64_t>(chunk) * W;
          const Pack<T, W> res = LoadFastChunk<T, W>(r.residual + index);
#pragma unroll
          for (int j = 0; j < W; ++j) {
            v[k].e[j] = FromFloat<T>(ToFloat(v[k].e[j]) + ToFloat(res.e[j]));
          }
          if (r.residual_out != nullptr) StoreFastChunk<T, W>(r.residual_out + index, v[k]);
        }
      }
    }
    const RowStats stats = RowStatistics<T, V, W>(v, chunks, r.hidden, r.epsilon, kLayerNorm, team,
                                                  scratch, (it & 1) * 2);
    if (!ref.active) continue;
    if (r.gamma != nullptr) {
      if (kLayerNorm && r.beta != nullptr) {
        WriteFastRow<T, P, V, W, kLayerNorm, true, kLayerNorm>(r, v, stats, cache, team, chunks);
      } else {
        WriteFastRow<T, P, V, W, kLayerNorm, true, false>(r, v, stats, cache, team, chunks);
      }
    } else if (kLayerNorm && r.beta != nullptr) {
      WriteFastRow<T, P, V, W, kLayerNorm, false, kLayerNorm>(r, v, stats, cache, team, chunks);
    } else {
      WriteFastRow<T, P, V, W, kLayerNorm, false, false>(r, v, stats, cache, team, chunks);
    }
    if (team.rank == 0) {
      if (r.mean != nullptr) r.mean[r.row] = stats.mean_hi + stats.mean_lo;
      if (r.rstd != nullptr) r.rstd[r.row] = stats.rstd;
    }
  }
}

// Persistent like ForwardRowsKernel, with the same launch bound (up to 128
// registers a thread). A cap of 64 or 80 registers spills 0.3-1.5 KB a thread
// in the 4-slot and strided instantiations (ptxas, CUDA 13, sm_90), so the
// occupancy stays that of the general kernel; what changes is the
// instruction count per element.
template <typename T, typename P, int V, int W>
#ifdef NORMSVC_FORWARD_MAX_REGISTERS
// Tuning experiment shared with ForwardRowsKernel (norm_bench_r96).
__global__ void __maxnreg__(NORMSVC_FORWARD_MAX_REGISTERS)
#else
__global__ void __launch_bounds__(512, 1)
#endif
    ForwardFastKernel(const __grid_constant__ ForwardParams p) {
  __shared__ ReduceScratch scratch;
  extern __shared__ __align__(16) uint8_t fast_param_cache_bytes[];
  if (p.op == static_cast<uint8_t>(NormOp::kLayerNorm)) {
    if (p.segment_count == 1) {
      FastRows<T, P, V, W, true, true>(p, scratch, fast_param_cache_bytes);
    } else {
      FastRows<T, P, V, W, true, false>(p, scratch, fast_param_cache_bytes);
    }
  } else {
    if (p.segment_count == 1) {
      FastRows<T, P, V, W, false, true>(p, scratch, fast_param_cache_bytes);
    } else {
      FastRows<T, P, V, W, false, false>(p, scratch, fast_param_cache_bytes);
    }
  }
  // No block of a cluster may exit while another still reads its shared memory.
  if (p.shape.cluster > 1) ClusterSync();
}

}  // namespace normsvc::kernels::detail
