// Forward kernel for the common case, built for occupancy.
//
// Covers segments whose output dtype is the x dtype T and whose gamma/beta
// have dtype P (T or fp32), in the vector layout with 16-byte accesses (every
// pointer and row pitch of the segment aligned, rows of whole chunks) or in
// the strided layout (element-wise by construction); one segment (a whole
// tensor) or many (a server batch, through the segment table). Vector rows
// off a 16-byte boundary take ForwardRealignKernel
// (forward_realign_kernel.cuh), everything else ForwardRowsKernel
// (forward_kernel.cuh).
//
// Why it is shaped this way: the persistent general kernel keeps the next row
// in registers and a gamma/beta cache in shared memory; that costs up to 128
// registers a thread and leaves 16 warps on an SM, too few to hide the
// latency of the loads and of the row reductions (the profile in
// BENCHMARKS.md). Here a block takes one row group at a time from a grid
// sized to the rows, holds only the current rows, reads gamma/beta through
// the read-only cache after the statistics, and is compiled for at most 64
// registers (2 blocks of 512 or 4 of 256 threads per SM), so the hardware
// overlaps the loads of one block with the arithmetic and reductions of
// others. The op and the single-segment case are decided once per launch;
// the presence of gamma/beta and of the residual once per row.
//
// The arithmetic is the general kernel's, operation for operation
// (RowStatistics, NormalizedValue, ApplyAffine) with the same thread mapping
// (the plan), so a row gives the same bits here as in a multi-segment launch
// or on the general path (batch invariance).
#pragma once

#include <type_traits>

#include "async_copy.cuh"
#include "forward_kernel.cuh"
#include "segment_lookup.cuh"

namespace normsvc::kernels::detail {

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

// A thread's gamma/beta chunks staged in shared memory (ForwardLeanKernel's
// kStageParams): slot (q * V + k) * stride of `base` holds chunk k of gamma
// (q = 0) or beta (q = 1), 16 bytes (P is T), copied by this thread alone.
struct StagedParams {
  const uint4* base = nullptr;
  int stride = 0;
};

template <typename P, int W>
__device__ __forceinline__ void ReadStagedParams(const uint4& slot, float (&v)[W]) {
  static_assert(sizeof(P) * W == 16, "a staged chunk is 16 bytes");
  Pack<P, W> pack;
  reinterpret_cast<uint4&>(pack) = slot;
#pragma unroll
  for (int j = 0; j < W; ++j) v[j] = PackElement(pack, j);
}

// Whether WriteLeanRow's kPrefetch applies: only where a chunk of parameters
// is one 16-byte load (P is T), so that the packs in flight stay within the
// 64 registers of the lean kernels' launch bound.
template <typename P, int W, bool kPrefetch, bool kStaged>
inline constexpr bool kPrefetchParamPacks = kPrefetch && !kStaged && sizeof(P) * W == 16;

// How many chunks ahead of the one being written kPrefetch loads gamma/beta:
// one (two chunks' packs, 16 registers, in flight). All V ahead made ptxas
// spill 96 bytes a thread in the fp32 ring kernel; one ahead, 52.
inline constexpr int kParamLookahead = 1;

// kPrefetch: gamma/beta of chunk k + kParamLookahead are loaded (as raw
// packs) before chunk k is normalized and written. Otherwise each chunk's
// loads come right before its arithmetic, and the compiler, at 64 registers,
// issues them after the previous chunk's store: one read-only-cache (in
// practice L2) round trip a chunk, V a row, in a row loop that has nothing
// else to run under them (ForwardRingKernel). Same arithmetic either way.
template <typename T, typename P, int V, int W, bool kLayerNorm, bool kGamma, bool kBeta,
          bool kStaged = false, bool kPrefetch = false>
__device__ __forceinline__ void WriteLeanRow(const DeviceSegment& s, T* out,
                                             const Pack<T, W> (&v)[V], const RowStats& stats,
                                             const RowTeam& team, int chunks,
                                             StagedParams staged = {}) {
  const P* gamma = static_cast<const P*>(s.gamma);
  const P* beta = static_cast<const P*>(s.beta);
  constexpr bool kPacks = kPrefetchParamPacks<P, W, kPrefetch, kStaged>;
  constexpr int kRing = kParamLookahead + 1;
  Pack<P, W> gamma_packs[kPacks ? kRing : 1];
  Pack<P, W> beta_packs[kPacks ? kRing : 1];
  const auto load_packs = [&](int k) {
    const int chunk = k * team.row_threads + team.rank;
    if (k >= V || chunk >= chunks) return;
    const int64_t index = static_cast<int64_t>(chunk) * W;
    if constexpr (kGamma) {
      reinterpret_cast<uint4&>(gamma_packs[k % kRing]) =
          __ldg(reinterpret_cast<const uint4*>(gamma + index));
    }
    if constexpr (kBeta) {
      reinterpret_cast<uint4&>(beta_packs[k % kRing]) =
          __ldg(reinterpret_cast<const uint4*>(beta + index));
    }
  };
  if constexpr (kPacks) {
#pragma unroll
    for (int k = 0; k < kParamLookahead; ++k) load_packs(k);
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    if constexpr (kPacks) load_packs(k + kParamLookahead);
    const int chunk = k * team.row_threads + team.rank;
    if (chunk >= chunks) continue;
    const int64_t index = static_cast<int64_t>(chunk) * W;
    float g[W] = {};
    float b[W] = {};
    if constexpr (kStaged) {
      if constexpr (kGamma) ReadStagedParams<P, W>(staged.base[k * staged.stride], g);
      if constexpr (kBeta) ReadStagedParams<P, W>(staged.base[(V + k) * staged.stride], b);
    } else if constexpr (kPacks) {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if constexpr (kGamma) g[j] = PackElement(gamma_packs[k % kRing], j);
        if constexpr (kBeta) b[j] = PackElement(beta_packs[k % kRing], j);
      }
    } else {
      if constexpr (kGamma) LoadParamsAs<P, W>(gamma + index, true, g);
      if constexpr (kBeta) LoadParamsAs<P, W>(beta + index, true, b);
    }
    Pack<T, W> y;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float n = NormalizedValue(PackElement(v[k], j), stats, kLayerNorm);
      y.e[j] = FromFloat<T>(ApplyAffine(n, g[j], b[j], kGamma, kBeta));
    }
    StoreFastChunk<T, W>(out + index, y);
  }
}

// Calls write(gamma, beta) with the presence of the segment's gamma and beta
// as compile-time constants (std::true_type / std::false_type), decided once
// per row: the output loops are specialized for each of the four cases.
template <bool kLayerNorm, typename Write>
__device__ __forceinline__ void WithAffine(const DeviceSegment& s, Write&& write) {
  const bool has_gamma = s.gamma != nullptr;
  const bool has_beta = kLayerNorm && s.beta != nullptr;
  if (has_gamma && has_beta) {
    write(std::true_type{}, std::true_type{});
  } else if (has_gamma) {
    write(std::true_type{}, std::false_type{});
  } else if (has_beta) {
    write(std::false_type{}, std::true_type{});
  } else {
    write(std::false_type{}, std::false_type{});
  }
}

// Row `r` of segment `s` from its chunks in registers and its statistics:
// the output (affine specialized per segment) and the saved mean/rstd.
template <typename T, typename P, int V, int W, bool kLayerNorm, bool kStaged = false,
          bool kPrefetch = false>
__device__ __forceinline__ void FinishLeanRow(const DeviceSegment& s, int64_t r,
                                              const Pack<T, W> (&v)[V], const RowStats& stats,
                                              const RowTeam& team, int chunks,
                                              StagedParams staged = {}) {
  T* out = static_cast<T*>(s.out) + r * s.out_stride;
  WithAffine<kLayerNorm>(s, [&](auto gamma, auto beta) {
    WriteLeanRow<T, P, V, W, kLayerNorm, decltype(gamma)::value, decltype(beta)::value, kStaged,
                 kPrefetch>(s, out, v, stats, team, chunks, staged);
  });
  if (team.rank == 0) {
    if (s.mean != nullptr) s.mean[r] = stats.mean_hi + stats.mean_lo;
    if (s.rstd != nullptr) s.rstd[r] = stats.rstd;
  }
}

// Issues this thread's gamma/beta chunks of the one segment as 16-byte
// cp.async copies into its own slots of `slots` (StagedParams' layout), so
// that they arrive while x loads and the row's statistics are computed.
template <typename T, typename P, int V, int W, bool kLayerNorm>
__device__ __forceinline__ StagedParams StageParams(const DeviceSegment& s, const RowTeam& team,
                                                    uint4* slots) {
  const int chunks = s.hidden / W;
  const int stride = static_cast<int>(blockDim.x);
  uint4* own = slots + threadIdx.x;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int chunk = k * team.row_threads + team.rank;
    if (chunk >= chunks) continue;
    const int64_t index = static_cast<int64_t>(chunk) * W;
    if (s.gamma != nullptr) {
      CopyAsync16(own + k * stride, static_cast<const P*>(s.gamma) + index);
    }
    if (kLayerNorm && s.beta != nullptr) {
      CopyAsync16(own + (V + k) * stride, static_cast<const P*>(s.beta) + index);
    }
  }
  CommitAsyncCopies();
  return StagedParams{own, stride};
}

template <typename T, typename P, int V, int W, bool kLayerNorm, bool kSingle, bool kCluster,
          bool kStageParams>
__device__ __forceinline__ void LeanRows(const ForwardParams& p, ReduceScratch& scratch) {
  const RowTeam team = MakeTeamFor<kCluster>(p.shape);
  const RowSchedule schedule = MakeSchedule(p.shape, p.row_groups);
  StagedParams staged;
  if constexpr (kStageParams) {
    static_assert(kSingle && !kCluster, "parameters are staged for one in-block segment");
    extern __shared__ __align__(128) uint4 param_slots[];
    if (schedule.iterations > 0) {
      staged = StageParams<T, P, V, W, kLayerNorm>(p.single, team, param_slots);
    }
  }
  for (int it = 0; it < schedule.iterations; ++it) {
    const int64_t block_row = schedule.FirstRowOf(it);
    const int64_t row = block_row + team.group;
    const bool active = row < p.total_rows;
    int64_t r = row;  // the row within its segment
    const DeviceSegment* segment = &p.single;
    if constexpr (!kSingle) {
      segment = LocateSegment(p, active ? row : p.total_rows - 1, &r);
    }
    const DeviceSegment& s = *segment;
    const int chunks = s.hidden / W;
    const T* x = static_cast<const T*>(s.x) + r * s.x_stride;
    Pack<T, W> v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (active && chunk < chunks) {
        v[k] = LoadFastChunk<T, W>(x + static_cast<int64_t>(chunk) * W);
      } else {
        ZeroPack(v[k]);
      }
    }
    if (s.residual != nullptr && active) {
      const T* residual = static_cast<const T*>(s.residual) + r * s.residual_stride;
      T* residual_out =
          s.residual_out ? static_cast<T*>(s.residual_out) + r * s.residual_out_stride : nullptr;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int chunk = k * team.row_threads + team.rank;
        if (chunk < chunks) {
          const int64_t index = static_cast<int64_t>(chunk) * W;
          v[k] = AddResidual(v[k], LoadFastChunk<T, W>(residual + index));
          if (residual_out != nullptr) StoreFastChunk<T, W>(residual_out + index, v[k]);
        }
      }
    }
    // Every thread of the block reaches the reductions, active row or not.
    const RowStats stats = RowStatistics<T, V, W>(v, chunks, s.hidden, s.epsilon, kLayerNorm, team,
                                                  scratch, (it & 1) * 2);
    if constexpr (kStageParams) {
      if (it == 0) WaitAsyncCopies<0>();  // this thread's own copies: no barrier
    }
    if (active) {
      FinishLeanRow<T, P, V, W, kLayerNorm, kStageParams>(s, r, v, stats, team, chunks, staged);
    }
  }
}

// At most 64 registers a thread (kLeanMinBlocks blocks of 512 threads per SM)
// in the vector layout; the strided layout's 16 one-element slots, each with
// its own address, keep the 128-register budget (at 64 they spill 2 KB).
// NORMSVC_LEAN_MIN_BLOCKS overrides it for tuning builds (norm_bench_lean<N>).
inline constexpr int kLeanMaxThreads = 512;
#ifdef NORMSVC_LEAN_MIN_BLOCKS
inline constexpr int kLeanMinBlocks = NORMSVC_LEAN_MIN_BLOCKS;
#else
inline constexpr int kLeanMinBlocks = 2;
#endif

// kSingle: the launch holds one segment (read from the parameters); else the
// segment table. Two kernels rather than a branch, so that the table's extra
// registers do not cost the one-segment case. kCluster: the plan's rows span
// a cluster of blocks; its own kernels, so that the cluster steps of the
// reductions (and the merged LayerNorm statistic's registers) do not cost
// the plans whose rows lie within a block.
// kStageParams (one in-block segment, P = T, vector layout): the block's
// gamma/beta chunks go to shared memory by cp.async as it starts
// (ParamStagingBytes of dynamic shared memory), so that a block does not
// wait for them after its statistics; the launcher takes it for launches of
// one wave (small batches), where that wait is on the critical path, and
// for longer ones as StagesMultiWaveLaunch (kernel_registry.h) says. Same
// arithmetic, same bits.
template <typename T, typename P, int V, int W, bool kSingle, bool kCluster,
          bool kStageParams = false>
__global__ void __launch_bounds__(kLeanMaxThreads, W == 1 ? 1 : kLeanMinBlocks)
    ForwardLeanKernel(const __grid_constant__ ForwardParams p) {
  BeginDependentGrid();
  __shared__ ReduceScratch scratch;
  if constexpr (kCluster) BeginClusterExchanges(scratch);
  if (p.op == static_cast<uint8_t>(NormOp::kLayerNorm)) {
    LeanRows<T, P, V, W, true, kSingle, kCluster, kStageParams>(p, scratch);
  } else {
    LeanRows<T, P, V, W, false, kSingle, kCluster, kStageParams>(p, scratch);
  }
  // No block of a cluster may exit while another may still access its shared memory.
  if constexpr (kCluster) ClusterSync();
}

}  // namespace normsvc::kernels::detail
