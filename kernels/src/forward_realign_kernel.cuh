// Forward kernel for rows that do not start on a 16-byte boundary: hidden
// sizes that are not a multiple of the vector width (row r of a contiguous
// tensor starts r * H elements in, so most rows are misaligned, and the last
// chunk of every row is partial) and tensors whose base or row pitch is not
// a multiple of 16 bytes.
//
// Contract (SegmentRealignable and ChooseForwardPath, forward_segments.cc and
// kernel_registry.h): one kernel
// serves a segment whose out, residual and residual_out rows each start
// where its x row starts relative to a 16-byte boundary (`lead` elements
// past it, the same for every tensor of a row), whose gamma/beta are 16-byte
// aligned, whose output dtype is its x dtype, and whose plan is the vector
// layout within a block with at most kRealignMaxSlots slots (launch_plan.h,
// kernel_registry.h).
//
// How: the row is read as the aligned 16-byte chunks that cover it (the two
// at its ends element by element, so that no byte outside the row is read).
// A thread owns logical chunk c (the plan's elements [cW, cW + W)) and
// loads aligned chunks c and c + 1, which hold it; the statistics are taken
// over the logical chunks, exactly as the other kernels of the plan take
// them, so a row's bits do not depend on its alignment or on the kernel
// that served it. The output is written in the aligned frame: the thread of
// logical chunk c normalizes aligned chunk c + 1, which it holds whole, with
// gamma/beta shifted into that frame, and stores it as one 16-byte store
// (the thread of chunk 0 also writes the row's first, partial, aligned
// chunk). Every element's output is the same function of its value and the
// row's statistics as elsewhere (NormalizedValue, ApplyAffine), so the bits
// are those of the general kernel.
#pragma once

#include <cstdint>
#include <type_traits>

#include "forward_kernel.cuh"
#include "forward_lean_kernel.cuh"
#include "realign_shift.h"
#include "segment_lookup.cuh"

namespace normsvc::kernels::detail {

// Elements [e, e + W) of the 2W elements lo ++ hi, for 0 <= e < W (the same
// in every thread of a row): realign_shift.h, on the packs' words.
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> ShiftPack(const Pack<T, W>& lo, const Pack<T, W>& hi, int e) {
  static_assert(sizeof(Pack<T, W>) % 4 == 0, "packs of whole 32-bit words");
  constexpr int kWords = static_cast<int>(sizeof(Pack<T, W>) / 4);
  Pack<T, W> out;
  ShiftWords<kWords>(reinterpret_cast<const uint32_t(&)[kWords]>(lo),
                     reinterpret_cast<const uint32_t(&)[kWords]>(hi),
                     e * static_cast<int>(sizeof(T)), reinterpret_cast<uint32_t(&)[kWords]>(out));
  return out;
}

// The element-by-element accesses of the chunks at a row's ends. Out of
// line: a row has at most two such chunks a tensor, and inlined at every
// call site their per-element addresses and predicates would take the
// registers of the 16-byte path.
template <typename T, int W>
__device__ __noinline__ Pack<T, W> LoadRowEnd(const T* chunk, int first, int hidden) {
  Pack<T, W> pack;
  ZeroPack(pack);
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (first + j >= 0 && first + j < hidden) pack.e[j] = LoadStreaming(chunk + j);
  }
  return pack;
}

template <typename T, int W>
__device__ __noinline__ void StoreRowEnd(T* chunk, int first, int hidden, Pack<T, W> pack) {
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (first + j >= 0 && first + j < hidden) StoreStreaming(chunk + j, pack.e[j]);
  }
}

template <typename P, int W>
__device__ __noinline__ Pack<P, W> LoadParamsEnd(const P* chunk, int first, int hidden) {
  Pack<P, W> pack;
  ZeroPack(pack);
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (first + j < hidden) pack.e[j] = chunk[j];
  }
  return pack;
}

// Aligned chunk `a` of a row whose element 0 lies `lead` elements past the
// 16-byte boundary `base`: the row's elements [aW - lead, aW - lead + W).
// Positions outside the row (of `hidden` elements) are zero and not read.
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> LoadAlignedChunk(const T* base, int a, int lead, int hidden) {
  const int first = a * W - lead;
  if (first >= 0 && first + W <= hidden) return LoadFastChunk<T, W>(base + a * W);
  return LoadRowEnd<T, W>(base + a * W, first, hidden);
}

// Writes the elements of aligned chunk `a` that lie in the row.
template <typename T, int W>
__device__ __forceinline__ void StoreAlignedChunk(T* base, int a, int lead, int hidden,
                                                  const Pack<T, W>& pack) {
  const int first = a * W - lead;
  if (first >= 0 && first + W <= hidden) {
    StoreFastChunk<T, W>(base + a * W, pack);
  } else {
    StoreRowEnd<T, W>(base + a * W, first, hidden, pack);
  }
}

// Chunk c of gamma or beta (16-byte aligned, `hidden` elements), zeros past
// its end and for c < 0; read-only cached.
template <typename P, int W>
__device__ __forceinline__ Pack<P, W> LoadParamChunk(const P* params, int c, int hidden) {
  const int first = c * W;
  constexpr int kBytes = static_cast<int>(sizeof(P)) * W;
  static_assert(kBytes % 16 == 0, "parameter chunks of whole 16-byte words");
  if (c >= 0 && first + W <= hidden) {
    Pack<P, W> pack;
#pragma unroll
    for (int q = 0; q < kBytes / 16; ++q) {
      reinterpret_cast<uint4*>(&pack)[q] =
          __ldg(reinterpret_cast<const uint4*>(params + first) + q);
    }
    return pack;
  }
  if (c < 0) {
    Pack<P, W> zero;
    ZeroPack(zero);
    return zero;
  }
  return LoadParamsEnd<P, W>(params + first, first, hidden);
}

// The output of W values whose gamma/beta are `g`/`b` (ApplyAffine and
// NormalizedValue: the bits of every other forward kernel).
template <typename T, typename P, int W, bool kLayerNorm, bool kGamma, bool kBeta>
__device__ __forceinline__ Pack<T, W> NormalizePack(const Pack<T, W>& v, const Pack<P, W>& g,
                                                    const Pack<P, W>& b, const RowStats& stats) {
  Pack<T, W> y;
#pragma unroll
  for (int j = 0; j < W; ++j) {
    const float n = NormalizedValue(PackElement(v, j), stats, kLayerNorm);
    const float gj = kGamma ? PackElement(g, j) : 0.0f;
    const float bj = kBeta ? PackElement(b, j) : 0.0f;
    y.e[j] = FromFloat<T>(ApplyAffine(n, gj, bj, kGamma, kBeta));
  }
  return y;
}

// gamma or beta for the output chunk of logical chunk c: aligned chunk
// c + 1 (from logical chunks c and c + 1) when lead > 0, else chunk c itself.
// For c = -1 (lead > 0): aligned chunk 0.
template <typename P, int W>
__device__ __forceinline__ Pack<P, W> AlignedParams(const P* params, int c, int lead, int hidden) {
  if constexpr (sizeof(Pack<P, W>) > 16) {
    // fp32 parameters of 16-bit activations: 32-byte chunks, whose shift
    // over 16 words costs more registers than reading the 8 elements of the
    // aligned frame one by one (4-byte loads, cached).
    const int first = (lead != 0 ? c + 1 : c) * W - lead;
    Pack<P, W> pack;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      pack.e[j] = first + j >= 0 && first + j < hidden ? __ldg(params + first + j) : P(0.0f);
    }
    return pack;
  } else {
    if (lead == 0) return LoadParamChunk<P, W>(params, c, hidden);
    return ShiftPack<P, W>(LoadParamChunk<P, W>(params, c, hidden),
                           LoadParamChunk<P, W>(params, c + 1, hidden), W - lead);
  }
}

// Whether the realigning kernel takes a row's interior chunks by untested
// 16-byte accesses and its end chunks apart (16-bit rows), or every chunk
// by the bounded path (fp32 rows). Measured on the H200 (BENCHMARKS.md,
// round 17): at H = 2049 the split gave bf16 +9 % (LayerNorm) and +18 %
// (RMSNorm), fp32 +2 % and -5 %.
template <typename T>
inline constexpr bool kSplitRowEnds = sizeof(T) == 2;

// gamma or beta in the aligned frame of logical chunk c (AlignedParams)
// when every parameter element it reads lies inside the row: no bounds
// tests.
template <typename P, int W>
__device__ __forceinline__ Pack<P, W> InteriorAlignedParams(const P* params, int c, int lead) {
  Pack<P, W> pack;
  if constexpr (sizeof(Pack<P, W>) > 16) {
    const int first = (lead != 0 ? c + 1 : c) * W - lead;
#pragma unroll
    for (int j = 0; j < W; ++j) pack.e[j] = __ldg(params + first + j);
  } else {
    reinterpret_cast<uint4&>(pack) = __ldg(reinterpret_cast<const uint4*>(params + c * W));
    if (lead != 0) {
      Pack<P, W> next;
      reinterpret_cast<uint4&>(next) = __ldg(reinterpret_cast<const uint4*>(params + (c + 1) * W));
      pack = ShiftPack<P, W>(pack, next, W - lead);
    }
  }
  return pack;
}

// Writes the row's output: each thread its aligned chunks `out_src` (aligned
// chunk c + 1 of its logical chunk c when lead > 0, else chunk c), and the
// thread of chunk 0 also the row's first aligned chunk, `first`, when it is
// partial (lead > 0).
template <typename T, typename P, int V, int W, bool kLayerNorm, bool kGamma, bool kBeta>
__device__ __forceinline__ void WriteRealignedRow(const DeviceSegment& s, T* out_base, int lead,
                                                  const Pack<T, W> (&out_src)[V],
                                                  const Pack<T, W>& first, const RowStats& stats,
                                                  const RowTeam& team, int chunks) {
  const P* gamma = static_cast<const P*>(s.gamma);
  const P* beta = static_cast<const P*>(s.beta);
  const int hidden = s.hidden;
  const int shift = lead != 0 ? 1 : 0;
  Pack<P, W> g;
  Pack<P, W> b;
  ZeroPack(g);
  ZeroPack(b);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int c = k * team.row_threads + team.rank;
    const int first = (c + shift) * W - lead;  // the output chunk's first element
    if (c >= chunks || first >= hidden) continue;
    if (kSplitRowEnds<T> && first >= 0 && first + W <= hidden && (c + 1 + shift) * W <= hidden) {
      // The output chunk and the parameter chunks it reads lie inside the row.
      if constexpr (kGamma) g = InteriorAlignedParams<P, W>(gamma, c, lead);
      if constexpr (kBeta) b = InteriorAlignedParams<P, W>(beta, c, lead);
      StoreFastChunk<T, W>(
          out_base + (c + shift) * W,
          NormalizePack<T, P, W, kLayerNorm, kGamma, kBeta>(out_src[k], g, b, stats));
    } else {
      if constexpr (kGamma) g = AlignedParams<P, W>(gamma, c, lead, hidden);
      if constexpr (kBeta) b = AlignedParams<P, W>(beta, c, lead, hidden);
      StoreAlignedChunk<T, W>(
          out_base, c + shift, lead, hidden,
          NormalizePack<T, P, W, kLayerNorm, kGamma, kBeta>(out_src[k], g, b, stats));
    }
    // One slot's parameters at a time: issued for every slot at once, their
    // loads and shifts hold more registers than the 64 a thread has.
    asm volatile("" ::: "memory");
  }
  if (lead != 0 && team.rank == 0) {
    if constexpr (kGamma) g = AlignedParams<P, W>(gamma, -1, lead, hidden);
    if constexpr (kBeta) b = AlignedParams<P, W>(beta, -1, lead, hidden);
    StoreAlignedChunk<T, W>(out_base, 0, lead, hidden,
                            NormalizePack<T, P, W, kLayerNorm, kGamma, kBeta>(first, g, b, stats));
  }
}

// Aligned chunks c and c + 1 (hi only when lead > 0) of x, plus the
// residual's, by the bounded accesses (LoadAlignedChunk).
template <typename T, int W>
__device__ __forceinline__ void LoadRealignedSlot(const T* x_base, const T* residual_base, int c,
                                                  int lead, int hidden, Pack<T, W>& lo,
                                                  Pack<T, W>& hi) {
  lo = LoadAlignedChunk<T, W>(x_base, c, lead, hidden);
  if (lead != 0) hi = LoadAlignedChunk<T, W>(x_base, c + 1, lead, hidden);
  if (residual_base != nullptr) {
    lo = AddResidual(lo, LoadAlignedChunk<T, W>(residual_base, c, lead, hidden));
    if (lead != 0) hi = AddResidual(hi, LoadAlignedChunk<T, W>(residual_base, c + 1, lead, hidden));
  }
}

// The elements before a pointer's 16-byte boundary.
template <typename T>
__device__ __forceinline__ int LeadOf(const T* p) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(p) & 15u) / sizeof(T));
}

template <typename T, typename P, int V, int W, bool kLayerNorm, bool kSingle>
__device__ __forceinline__ void RealignRows(const ForwardParams& p, ReduceScratch& scratch) {
  const RowTeam team = MakeBlockTeam(p.shape);
  const RowSchedule schedule = MakeSchedule(p.shape, p.row_groups);
  for (int it = 0; it < schedule.iterations; ++it) {
    const int64_t row = schedule.FirstRowOf(it) + team.group;
    const bool active = row < p.total_rows;
    int64_t r = row;
    const DeviceSegment* segment = &p.single;
    if constexpr (!kSingle) {
      segment = LocateSegment(p, active ? row : p.total_rows - 1, &r);
    }
    const DeviceSegment& s = *segment;
    const int hidden = s.hidden;
    const int chunks = (hidden + W - 1) / W;
    const T* x_row = static_cast<const T*>(s.x) + r * s.x_stride;
    const int lead = LeadOf(x_row);
    const T* x_base = x_row - lead;
    const T* residual_base =
        s.residual ? static_cast<const T*>(s.residual) + r * s.residual_stride - lead : nullptr;
    // lo, hi: aligned chunks c and c + 1 of each of the thread's logical
    // chunks c (hi zero when lead == 0); the logical chunk is
    // ShiftPack(lo, hi, lead), derived where the statistics read it rather
    // than held beside them (registers). The chunk a thread writes is hi
    // (aligned chunk c + 1) when lead > 0, else lo; the thread of chunk 0
    // also writes aligned chunk 0 (its lo[0]) when lead > 0.
    Pack<T, W> lo[V];
    Pack<T, W> hi[V];
    if constexpr (kSplitRowEnds<T>) {
      // Chunks whose aligned chunks lie inside the row take 16-byte loads
      // without further tests; the row's end chunks (at most two a row) the
      // bounded, out-of-line loads after them.
      const int span = lead != 0 ? 2 * W : W;  // the elements of the aligned chunks read
      unsigned ends = 0;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int c = k * team.row_threads + team.rank;
        ZeroPack(lo[k]);
        ZeroPack(hi[k]);
        if (!active || c >= chunks) continue;
        const int first = c * W - lead;
        if (first < 0 || first + span > hidden) {
          ends |= 1u << k;
          continue;
        }
        lo[k] = LoadFastChunk<T, W>(x_base + c * W);
        if (lead != 0) hi[k] = LoadFastChunk<T, W>(x_base + (c + 1) * W);
        if (residual_base != nullptr) {
          lo[k] = AddResidual(lo[k], LoadFastChunk<T, W>(residual_base + c * W));
          if (lead != 0) {
            hi[k] = AddResidual(hi[k], LoadFastChunk<T, W>(residual_base + (c + 1) * W));
          }
        }
      }
      if (ends != 0) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if ((ends & (1u << k)) != 0) {
            LoadRealignedSlot(x_base, residual_base, k * team.row_threads + team.rank, lead, hidden,
                              lo[k], hi[k]);
          }
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int c = k * team.row_threads + team.rank;
        ZeroPack(lo[k]);
        ZeroPack(hi[k]);
        if (active && c < chunks) {
          LoadRealignedSlot(x_base, residual_base, c, lead, hidden, lo[k], hi[k]);
        }
      }
    }
    // Every thread of the block reaches the reductions, active row or not.
    // Their exchanges also order every thread's loads of the row before any
    // store into it (a thread stores aligned chunks its neighbour loads), so
    // out and residual_out may alias x or residual.
    const RowStats stats = RowStatisticsOf<T, V, W, true>(
        [&](int k) { return ShiftPack<T, W>(lo[k], hi[k], lead); }, chunks, hidden, s.epsilon,
        kLayerNorm, team, scratch, (it & 1) * 2);
    // Rows of a warp or less reduce by shuffles alone, which order the row's
    // loads before them only through data dependence; the warp barrier makes
    // that a guarantee of the memory model.
    __syncwarp();
    if (!active) continue;
    Pack<T, W> out_src[V];
#pragma unroll
    for (int k = 0; k < V; ++k) out_src[k] = lead != 0 ? hi[k] : lo[k];
    const Pack<T, W>& first = lo[0];
    const int shift = lead != 0 ? 1 : 0;
    if (s.residual_out != nullptr) {
      T* residual_out_base = static_cast<T*>(s.residual_out) + r * s.residual_out_stride - lead;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int c = k * team.row_threads + team.rank;
        if (c < chunks && (c + shift) * W - lead < hidden) {
          StoreAlignedChunk<T, W>(residual_out_base, c + shift, lead, hidden, out_src[k]);
        }
      }
      if (lead != 0 && team.rank == 0) {
        StoreAlignedChunk<T, W>(residual_out_base, 0, lead, hidden, first);
      }
    }
    T* out_base = static_cast<T*>(s.out) + r * s.out_stride - lead;
    WithAffine<kLayerNorm>(s, [&](auto has_gamma, auto has_beta) {
      WriteRealignedRow<T, P, V, W, kLayerNorm, decltype(has_gamma)::value,
                        decltype(has_beta)::value>(s, out_base, lead, out_src, first, stats, team,
                                                   chunks);
    });
    if (team.rank == 0) {
      if (s.mean != nullptr) s.mean[r] = stats.mean_hi + stats.mean_lo;
      if (s.rstd != nullptr) s.rstd[r] = stats.rstd;
    }
  }
}

// Blocks of row groups, as ForwardLeanKernel (at most kLeanMaxThreads
// threads, kLeanMinBlocks blocks a multiprocessor), each looping over the
// row groups its index reaches (RowSchedule): LayerNorm's launches take a
// block a row group, RMSNorm's one wave of blocks (forward_launch.cu).
// kSingle: one segment, read from the parameters; else the segment table.
template <typename T, typename P, int V, int W, bool kSingle>
__global__ void __launch_bounds__(kLeanMaxThreads, kLeanMinBlocks)
    ForwardRealignKernel(const __grid_constant__ ForwardParams p) {
  BeginDependentGrid();
  __shared__ ReduceScratch scratch;
  if (p.op == static_cast<uint8_t>(NormOp::kLayerNorm)) {
    RealignRows<T, P, V, W, true, kSingle>(p, scratch);
  } else {
    RealignRows<T, P, V, W, false, kSingle>(p, scratch);
  }
}

}  // namespace normsvc::kernels::detail
