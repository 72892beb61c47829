// Forward for the realigning kernel's rows (ForwardPath::kRealign: vector
// rows that do not start on a 16-byte boundary, H not a multiple of the
// vector width included) with each row staged in shared memory instead of
// shifted in registers. Segments without a residual: one, or a group of a
// multi-segment launch (the segment table; the launch key keeps segments
// with a residual apart, forward_segments.cc).
//
// How: a persistent block copies each of its rows' aligned 16-byte chunks
// into a stage in shared memory (cp.async) one row group ahead of the rows
// it normalizes. A row's end chunks are copied whole too, with the bytes of
// the neighbouring rows (or the padding between rows) that share them,
// which are never used (the other kernels of the plan read those chunks
// element by element); only a chunk that reaches past the segment's last
// element (for a table of segments: past the row's end) is copied element
// by element, so no byte outside the allocation is read (StageRow). After a row barrier each thread
// reads its logical chunks (the plan's elements [cW, cW + W)) from the stage as 4-byte words, and a
// byte permute a word where the row starts 2 bytes off a 4-byte boundary: no barrel shift, and no
// second aligned chunk held a slot. The statistics are RowStatistics over those chunks (the plan's
// order, so the bits of every other kernel of the plan); each chunk's output is NormalizePack with
// gamma/beta of its own, aligned, chunk (no shift); the outputs go back into the stage at their
// logical places, and after a second row barrier each thread stores the stage's aligned chunks
// (16-byte stores; the row's partial end chunks element by element).
#pragma once

#include <cstddef>
#include <cstdint>

#include "async_copy.cuh"
#include "forward_realign_kernel.cuh"
#include "segment_lookup.cuh"

namespace normsvc::kernels::detail {

// Bytes of one row's stage for a plan of `capacity` logical chunks a row
// (slots x row threads; a row has at most that many): the row's aligned
// chunks, at most capacity + 1 (a logical chunk's reads, its fifth word
// included, reach at most the last byte of slot capacity). Sized by the
// plan, not by H, so that every H of a plan shares one launch
// configuration (and one entry of the launchers' occupancy cache).
__host__ __device__ constexpr int RealignStageRowBytes(int capacity) { return (capacity + 1) * 16; }

// Dynamic shared memory of a launch: `stages` stages (the rows being
// normalized and the next stages - 1 row groups loading) of `groups` rows
// each.
__host__ __device__ constexpr std::size_t RealignStagedSmemBytes(int groups, int capacity,
                                                                 int stages) {
  return static_cast<std::size_t>(stages) * static_cast<std::size_t>(groups) *
         static_cast<std::size_t>(RealignStageRowBytes(capacity));
}

// Starts the copies of a row into `stage`: aligned chunk a (the row's
// elements [aW - lead, aW - lead + W)) at stage + 16a, for this thread's
// a = rank, rank + row_threads, ... up to `chunks` (the slot past the row's
// last aligned chunk, when there is one, is zeros). An aligned chunk the
// row touches is copied whole by cp.async, its bytes outside the row
// included (never used: ReadStagedChunk's windows start at the row's first
// element, and the last logical chunk is masked), when it ends at or before
// `limit` (one past the segment's last element): bytes before a row's start
// within its 16-byte chunk never lie outside the allocation (allocations
// start on 16-byte boundaries), bytes past the segment's end may. Other
// chunks are copied element by element.
template <typename T, int V, int W>
__device__ __forceinline__ void StageRow(unsigned char* stage, const T* x_base, int lead,
                                         int hidden, int chunks, const T* limit,
                                         const RowTeam& team) {
  const int aligned = (lead + hidden + W - 1) / W;  // aligned chunks the row touches
#pragma unroll
  for (int j = 0; j <= V; ++j) {
    const int a = j * team.row_threads + team.rank;
    if (a > chunks) break;
    uint4* slot = reinterpret_cast<uint4*>(stage) + a;
    const int first = a * W - lead;
    if (a >= aligned) {
      *slot = make_uint4(0, 0, 0, 0);
    } else if (x_base + (a + 1) * W <= limit) {
      CopyAsync16(slot, x_base + a * W);
    } else {
      const Pack<T, W> pack = LoadRowEnd<T, W>(x_base + a * W, first, hidden);
      *slot = reinterpret_cast<const uint4&>(pack);
    }
  }
}

// The 16 bytes at `byte_offset` of a stage (a multiple of the element size:
// for 16-bit rows 2 bytes off a 4-byte boundary when the row starts an odd
// number of elements past a 16-byte one).
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> ReadStagedChunk(const unsigned char* stage, int byte_offset) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(stage + (byte_offset & ~3));
  Pack<T, W> pack;
  uint32_t* out = reinterpret_cast<uint32_t*>(&pack);
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = words[i];
  } else {
    // Word i of the chunk: the high half of stage word i and the low half of
    // word i + 1 when the offset is 2 mod 4, else stage word i.
    const uint32_t selector = (byte_offset & 2) != 0 ? 0x5432u : 0x3210u;
    uint32_t w[5];
#pragma unroll
    for (int i = 0; i < 5; ++i) w[i] = words[i];
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __byte_perm(w[i], w[i + 1], selector);
  }
  return pack;
}

// Writes `pack` as the 16 bytes at `byte_offset` of a stage (the inverse of
// ReadStagedChunk; the bytes around it are left as they are).
template <typename T, int W>
__device__ __forceinline__ void WriteStagedChunk(unsigned char* stage, int byte_offset,
                                                 const Pack<T, W>& pack) {
  const uint32_t* in = reinterpret_cast<const uint32_t*>(&pack);
  if (sizeof(T) == 4 || (byte_offset & 2) == 0) {
    uint32_t* words = reinterpret_cast<uint32_t*>(stage + byte_offset);
#pragma unroll
    for (int i = 0; i < 4; ++i) words[i] = in[i];
  } else {
    // 2 bytes off a 4-byte boundary: a half word, three words, a half word.
    *reinterpret_cast<uint16_t*>(stage + byte_offset) = static_cast<uint16_t>(in[0]);
    uint32_t* words = reinterpret_cast<uint32_t*>(stage + byte_offset + 2);
#pragma unroll
    for (int i = 0; i < 3; ++i) words[i] = __byte_perm(in[i], in[i + 1], 0x5432u);
    *reinterpret_cast<uint16_t*>(stage + byte_offset + 14) = static_cast<uint16_t>(in[3] >> 16);
  }
}

// Waits until every thread of the calling thread's row has reached this
// point (the row's named barrier; a row of one warp: the warp).
__device__ __forceinline__ void StagedRowBarrier(const RowTeam& team) {
  if (team.row_threads <= 32) {
    __syncwarp();
  } else {
    RowBarrier(team);
  }
}

// The segment of launch row `row` and, in *local_row, the row within it.
template <bool kSingle>
__device__ __forceinline__ const DeviceSegment& StagedRowSegment(const ForwardParams& p,
                                                                 int64_t row, int64_t* local_row) {
  if constexpr (kSingle) {
    *local_row = row;
    return p.single;
  } else {
    return *LocateSegment(p, row, local_row);
  }
}

template <typename T, typename P, int V, int W, int kStages, bool kLayerNorm, bool kSingle>
__device__ __forceinline__ void StagedRealignRows(const ForwardParams& p, unsigned char* smem,
                                                  ReduceScratch& scratch) {
  const RowTeam team = MakeBlockTeam(p.shape);
  const RowSchedule schedule = MakeSchedule(p.shape, p.row_groups);
  const int row_bytes = RealignStageRowBytes(V * team.row_threads);
  // Stage b (0 to kStages - 1) of this row group.
  auto stage_of = [&](int b) { return smem + (b * schedule.groups + team.group) * row_bytes; };
  // Starts iteration `it`'s copies into `stage`, as one commit group (empty
  // past the last row, so that every thread commits one group a call).
  auto issue = [&](int it, unsigned char* stage) {
    const int64_t row = schedule.FirstRowOf(it) + team.group;
    if (it < schedule.iterations && row < p.total_rows) {
      int64_t r = 0;
      const DeviceSegment& s = StagedRowSegment<kSingle>(p, row, &r);
      const int hidden = s.hidden;
      const T* x_row = static_cast<const T*>(s.x) + r * s.x_stride;
      const int lead = LeadOf(x_row);
      // Whole chunks up to the segment's last element for one segment (its
      // rows are the launch's), else up to the row's end (a table entry
      // does not hold its segment's row count).
      const T* limit = kSingle
                           ? static_cast<const T*>(s.x) + (p.total_rows - 1) * s.x_stride + hidden
                           : x_row + hidden;
      StageRow<T, V, W>(stage, x_row - lead, lead, hidden, (hidden + W - 1) / W, limit, team);
    }
    CommitAsyncCopies();
  };

#pragma unroll
  for (int ahead = 0; ahead < kStages - 1; ++ahead) issue(ahead, stage_of(ahead));
  for (int it = 0; it < schedule.iterations; ++it) {
    unsigned char* const stage = stage_of(it % kStages);
    // This iteration's group is the oldest of the kStages - 1 pending.
    WaitAsyncCopies<kStages - 2>();
    // Every thread's copies of this row are in; and every thread of the row
    // is done with the previous iteration, whose stage the next copies reuse.
    StagedRowBarrier(team);
    issue(it + kStages - 1, stage_of((it + kStages - 1) % kStages));

    const int64_t row = schedule.FirstRowOf(it) + team.group;
    const bool active = row < p.total_rows;
    int64_t r = 0;
    const DeviceSegment& s = StagedRowSegment<kSingle>(p, active ? row : p.total_rows - 1, &r);
    const int hidden = s.hidden;
    const int chunks = (hidden + W - 1) / W;
    // The elements of the last logical chunk past the row's end: zeros (the
    // stage holds the next row's bytes there), as every kernel of the plan
    // holds them.
    const int tail_elements = hidden - (chunks - 1) * W;
    const T* x_row = static_cast<const T*>(s.x) + r * s.x_stride;
    const int lead = LeadOf(x_row);
    const int lead_bytes = lead * static_cast<int>(sizeof(T));
    Pack<T, W> v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int c = k * team.row_threads + team.rank;
      if (active && c < chunks) {
        v[k] = ReadStagedChunk<T, W>(stage, lead_bytes + 16 * c);
        if (c == chunks - 1 && tail_elements < W) {
#pragma unroll
          for (int e = 0; e < W; ++e) {
            if (e >= tail_elements) v[k].e[e] = FromFloat<T>(0.0f);
          }
        }
      } else {
        ZeroPack(v[k]);
      }
    }
    // Every thread of the block reaches the reductions, active row or not;
    // their barriers also order every read of the stage above before the
    // writes into it below.
    const RowStats stats = RowStatistics<T, V, W, true>(v, chunks, hidden, s.epsilon, kLayerNorm,
                                                        team, scratch, (it & 1) * 2);
    __syncwarp();
    if (active) {
      WithAffine<kLayerNorm>(s, [&](auto has_gamma, auto has_beta) {
        constexpr bool kGamma = decltype(has_gamma)::value;
        constexpr bool kBeta = decltype(has_beta)::value;
        const P* gamma = static_cast<const P*>(s.gamma);
        const P* beta = static_cast<const P*>(s.beta);
        Pack<P, W> g;
        Pack<P, W> b;
        ZeroPack(g);
        ZeroPack(b);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const int c = k * team.row_threads + team.rank;
          if (c >= chunks) continue;
          if constexpr (kGamma) g = LoadParamChunk<P, W>(gamma, c, hidden);
          if constexpr (kBeta) b = LoadParamChunk<P, W>(beta, c, hidden);
          WriteStagedChunk<T, W>(
              stage, lead_bytes + 16 * c,
              NormalizePack<T, P, W, kLayerNorm, kGamma, kBeta>(v[k], g, b, stats));
        }
      });
    }
    StagedRowBarrier(team);
    if (active) {
      T* const out_base = static_cast<T*>(s.out) + r * s.out_stride - lead;
      const int aligned = (lead + hidden + W - 1) / W;
#pragma unroll
      for (int j = 0; j <= V; ++j) {
        const int a = j * team.row_threads + team.rank;
        if (a >= aligned) break;
        Pack<T, W> pack;
        reinterpret_cast<uint4&>(pack) = reinterpret_cast<const uint4*>(stage)[a];
        StoreAlignedChunk<T, W>(out_base, a, lead, hidden, pack);
      }
      if (team.rank == 0) {
        if (s.mean != nullptr) s.mean[r] = stats.mean_hi + stats.mean_lo;
        if (s.rstd != nullptr) s.rstd[r] = stats.rstd;
      }
    }
  }
  WaitAsyncCopies<0>();  // only empty groups can be pending
}

// One block a row group of the plan, persistent (at most one wave, each
// block looping over row groups); `RealignStagedSmemBytes` of dynamic shared
// memory for kStages stages.
// kSingle: one segment, read from the parameters; else the segment table.
template <typename T, typename P, int V, int W, bool kSingle, int kStages>
__global__ void __launch_bounds__(kLeanMaxThreads, kLeanMinBlocks)
    ForwardRealignStagedKernel(const __grid_constant__ ForwardParams p) {
  static_assert(kStages >= 2, "a stage normalized and at least one loading");
  BeginDependentGrid();
  extern __shared__ __align__(16) unsigned char realign_stages[];
  __shared__ ReduceScratch scratch;
  if (p.op == static_cast<uint8_t>(NormOp::kLayerNorm)) {
    StagedRealignRows<T, P, V, W, kStages, true, kSingle>(p, realign_stages, scratch);
  } else {
    StagedRealignRows<T, P, V, W, kStages, false, kSingle>(p, realign_stages, scratch);
  }
}

}  // namespace normsvc::kernels::detail
