// Forward kernel for rows whose H is not a multiple of the 16-byte vector
// width (the strided layout, H <= 8192), one segment per launch, no
// residual, output in the x dtype.
//
// Why: in the strided layout a thread's elements are one element apart in
// each of 16 slots, so loading a row from global memory takes 16 two- or
// four-byte loads a thread, and the registers they occupy cap the rows an SM
// keeps in flight far below what the memory system needs (0.17 of a copy's
// bandwidth for bf16 at H = 2049). Here asynchronous copies (cp.async, no
// registers; 16 bytes, and 8 and 4 at the row's end) move each row into
// shared memory from its first 16-byte boundary to its last 4-byte one,
// kStagedStages - 1 rows ahead of the block's arithmetic, whatever the row's
// alignment; the row's edges (the at most 7 elements before that 16-byte
// boundary, and a 16-bit row's last element when the row ends between two
// 4-byte boundaries) are loaded one row ahead into the registers of the
// threads that own them and written into the image before the row is read.
// No copy reads a byte outside the row. A block is persistent:
// it loops over its rows and keeps the next ones in flight.
// Each pass (sum, moments, output) reads the row from its image and visits
// only the slots that hold elements (9 of the plan's 16 at H = 2049), with
// no test of where an element lies: the profile of round 6 in BENCHMARKS.md
// found the kernel bound by the one-element slots' instructions, and round
// 12 a divergent branch an element where the image's ends were read from
// global memory.
//
// The thread mapping (element k * row_threads + rank in slot k), the
// arithmetic (RowStatistics, WriteLeanRow) and the plan are those of
// ForwardLeanKernel and ForwardRowsKernel, so a row gets the same bits here
// as in a multi-segment launch of those kernels (batch invariance).
#pragma once

#include "async_copy.cuh"
#include "forward_lean_kernel.cuh"

namespace normsvc::kernels::detail {

// Row images per block: the one being normalized and the next ones in flight.
inline constexpr int kStagedStages = 4;
inline constexpr int kStagedSlots = 16;  // the strided plan this kernel serves
// At most 40 registers a thread (3 blocks of 512, 6 of 256 per SM, where
// shared memory allows: gamma, beta and the row images cap large H and fp32
// parameters lower): with no row in registers the kernel needs no more, and
// more blocks per SM keep more rows in flight.
inline constexpr int kStagedMinBlocks = 3;

// Bytes of one row's image in shared memory: 16 for the row's head, then
// room for the rest of the row in whole 16-byte blocks.
__host__ __device__ constexpr uint32_t StagedBufferBytes(int64_t hidden, int64_t dtype_size) {
  return static_cast<uint32_t>(16 + (hidden * dtype_size + 15) / 16 * 16);
}

// Bytes of the block's copy of gamma and beta (H elements of the parameter
// dtype each), in whole 16-byte blocks.
__host__ __device__ constexpr uint32_t StagedParamBytes(int64_t hidden, int64_t param_size) {
  return static_cast<uint32_t>((2 * hidden * param_size + 15) / 16 * 16);
}

// Dynamic shared memory of a launch: gamma and beta, then every stage holds
// one image per row group of the block.
__host__ __device__ constexpr std::size_t StagedSharedBytes(int64_t hidden, int64_t dtype_size,
                                                            int64_t param_size, int groups) {
  return StagedParamBytes(hidden, param_size) +
         static_cast<std::size_t>(kStagedStages) * groups * StagedBufferBytes(hidden, dtype_size);
}

// The part of a row the copies move: from the first 16-byte boundary at or
// after the row's start to the last 4-byte boundary at or before its end; it
// goes to the image from byte 16 on. The row's head (the bytes before
// `begin`, at most 15) goes to the image's first 16 bytes, ending at byte 16,
// and its tail (the at most 2 bytes after the span) right after the span.
struct StagedSpan {
  uintptr_t begin;
  uint32_t bytes;  // a multiple of 4; 0 when the row ends before `begin` + 4
  int head_bytes;  // begin - the row's start
  bool has_tail;   // the row's last element lies after the span
};

__device__ __forceinline__ StagedSpan SpanOf(const void* row, int64_t row_bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(row);
  const uintptr_t begin = (start + 15) & ~uintptr_t{15};
  const uintptr_t end = start + static_cast<uintptr_t>(row_bytes);
  const uintptr_t words_end = end & ~uintptr_t{3};
  StagedSpan span;
  span.begin = begin;
  span.bytes = words_end > begin ? static_cast<uint32_t>(words_end - begin) : 0u;
  span.head_bytes = static_cast<int>(begin - start);
  span.has_tail = end > begin && words_end < end;
  return span;
}

template <typename T>
__device__ __forceinline__ const T* StagedRow(const DeviceSegment& s, int64_t row) {
  return static_cast<const T*>(s.x) + row * s.x_stride;
}

// Every thread of the block: starts its share of the copies of
// iteration `it`'s rows into `stage`, as one commit group (empty for a
// thread with no share, so that every thread counts the same groups).
template <typename T>
__device__ __forceinline__ void IssueStage(const ForwardParams& p, const RowSchedule& schedule,
                                           int it, int stage, unsigned char* images,
                                           uint32_t image_bytes) {
  const DeviceSegment& s = p.single;
  const int64_t first = schedule.FirstRowOf(it);
  const int64_t row_bytes = static_cast<int64_t>(s.hidden) * sizeof(T);
  const int64_t left = p.total_rows - first;
  const int rows = left < schedule.groups ? static_cast<int>(left) : schedule.groups;
  for (int g = 0; g < rows; ++g) {
    const StagedSpan span = SpanOf(StagedRow<T>(s, first + g), row_bytes);
    unsigned char* image =
        images + static_cast<uint32_t>(stage * schedule.groups + g) * image_bytes;
    const unsigned char* source = reinterpret_cast<const unsigned char*>(span.begin);
    for (uint32_t offset = threadIdx.x * 16u; offset < span.bytes; offset += blockDim.x * 16u) {
      const uint32_t left_bytes = span.bytes - offset;
      if (left_bytes >= 16u) {
        CopyAsync16(image + 16 + offset, source + offset);
        continue;
      }
      // The span's last 4-12 bytes: an 8-byte copy, then a 4-byte one.
      uint32_t at = offset;
      if (left_bytes >= 8u) {
        CopyAsync8(image + 16 + at, source + at);
        at += 8u;
      }
      if ((left_bytes & 4u) != 0u) CopyAsync4(image + 16 + at, source + at);
    }
  }
  CommitAsyncCopies();
}

// A row's image in shared memory, indexed like the row: element e at at[e]
// for every e < H once the row's edges are written into it (StagedRows).
template <typename T>
struct StagedImage {
  T* at;
};

template <typename T>
__device__ __forceinline__ StagedImage<T> ImageOf(const T* x, unsigned char* image,
                                                  int64_t row_bytes) {
  StagedImage<T> view;
  view.at = reinterpret_cast<T*>(image + 16 - SpanOf(x, row_bytes).head_bytes);
  return view;
}

// The elements of a row that no copy moves and the calling thread owns:
// `head`, element `rank` when it lies before the span; `tail`, the row's
// last element when it lies after the span and the thread owns it.
template <typename T>
struct StagedEdges {
  T head;
  T tail;
  bool has_head;
  bool has_tail;
};

template <typename T>
__device__ __forceinline__ StagedEdges<T> LoadEdges(const T* x, int hidden, const RowTeam& team) {
  const StagedSpan span = SpanOf(x, static_cast<int64_t>(hidden) * sizeof(T));
  StagedEdges<T> edges;
  edges.has_head = team.rank < hidden && team.rank * static_cast<int>(sizeof(T)) < span.head_bytes;
  edges.has_tail = span.has_tail && (hidden - 1) % team.row_threads == team.rank;
  edges.head = edges.has_head ? x[team.rank] : FromFloat<T>(0.0f);
  edges.tail = edges.has_tail ? x[hidden - 1] : FromFloat<T>(0.0f);
  return edges;
}

// Into the places of the image that no copy writes: before the span and
// after it.
template <typename T>
__device__ __forceinline__ void WriteEdges(const StagedImage<T>& image, const StagedEdges<T>& edges,
                                           int hidden, const RowTeam& team) {
  if (edges.has_head) image.at[team.rank] = edges.head;
  if (edges.has_tail) image.at[hidden - 1] = edges.tail;
}

// RowStatistics (forward_kernel.cuh) for one-element slots, operation for
// operation and in the same order, reading the row from its image in each
// pass instead of holding it in registers, and visiting only the slots that
// hold elements: the slots past the row's end add +0.0f there, which leaves
// a sum that starts at +0.0f unchanged, so the bits are the same. `present`
// is the row's element count, 0 for an inactive row (which still takes part
// in the block's reductions). Staged rows lie within a block, so LayerNorm
// takes the two-pass form.
template <typename T>
__device__ __forceinline__ RowStats StagedRowStatistics(const StagedImage<T>& image, int present,
                                                        int hidden, float epsilon, bool layer_norm,
                                                        const RowTeam& team, ReduceScratch& scratch,
                                                        int first_slot) {
  RowStats stats;
  const float h = static_cast<float>(hidden);
  if (!layer_norm) {
    float squares[1] = {0.0f};
    for (int element = team.rank; element < present; element += team.row_threads) {
      const float v = ToFloat(image.at[element]);
      squares[0] = fmaf(v, v, squares[0]);
    }
    RowSum<1>(squares, team, scratch, first_slot + 1);
    stats.rstd = RstdFromVariance(squares[0] / h, epsilon);
    return stats;
  }
  float sum[1] = {0.0f};
  for (int element = team.rank; element < present; element += team.row_threads) {
    sum[0] += ToFloat(image.at[element]);
  }
  RowSum<1>(sum, team, scratch, first_slot);
  stats.mean_hi = sum[0] / h;
  float moments[2] = {0.0f, 0.0f};
  for (int element = team.rank; element < present; element += team.row_threads) {
    const float d = ToFloat(image.at[element]) - stats.mean_hi;
    moments[0] += d;
    moments[1] = fmaf(d, d, moments[1]);
  }
  RowSum<2>(moments, team, scratch, first_slot + 1);
  FinishRowStatistics(moments, h, epsilon, layer_norm, stats);
  return stats;
}

// The block's gamma and beta in shared memory: params[e] and params[H + e].
// Group 0's threads copy their own elements (the elements every group's
// threads of the same rank read) as the block starts; the first row's
// barrier shows them to the other groups.
template <typename P>
__device__ __forceinline__ void StageParamsOf(const DeviceSegment& s, const RowTeam& team,
                                              P* params) {
  if (team.group != 0) return;
  const P* gamma = static_cast<const P*>(s.gamma);
  const P* beta = static_cast<const P*>(s.beta);
  for (int element = team.rank; element < s.hidden; element += team.row_threads) {
    if (gamma != nullptr) params[element] = __ldg(gamma + element);
    if (beta != nullptr) params[s.hidden + element] = __ldg(beta + element);
  }
}

// WriteLeanRow's arithmetic for one-element slots, re-reading each element
// from the image instead of holding the row in registers, and gamma and beta
// from the block's copy (StageParamsOf).
template <typename T, typename P, bool kLayerNorm, bool kGamma, bool kBeta>
__device__ __forceinline__ void WriteStagedRow(const DeviceSegment& s, const StagedImage<T>& image,
                                               const P* params, T* out, const RowStats& stats,
                                               const RowTeam& team) {
  const P* gamma = params;
  const P* beta = params + s.hidden;
  for (int element = team.rank; element < s.hidden; element += team.row_threads) {
    const float g = kGamma ? ToFloat(gamma[element]) : 0.0f;
    const float b = kBeta ? ToFloat(beta[element]) : 0.0f;
    const float n = NormalizedValue(ToFloat(image.at[element]), stats, kLayerNorm);
    StoreStreaming(out + element, FromFloat<T>(ApplyAffine(n, g, b, kGamma, kBeta)));
  }
}

template <typename T, typename P, bool kLayerNorm>
__device__ __forceinline__ void StagedRows(const ForwardParams& p, unsigned char* shared,
                                           ReduceScratch& scratch) {
  const DeviceSegment& s = p.single;
  const RowTeam team = MakeBlockTeam(p.shape);  // staged plans lie within a block
  const RowSchedule schedule = MakeSchedule(p.shape, p.row_groups);
  const int64_t row_bytes = static_cast<int64_t>(s.hidden) * sizeof(T);
  const uint32_t image_bytes = StagedBufferBytes(s.hidden, sizeof(T));
  P* const params = reinterpret_cast<P*>(shared);
  unsigned char* const images = shared + StagedParamBytes(s.hidden, sizeof(P));
  for (int it = 0; it < kStagedStages; ++it) {
    if (it < schedule.iterations) {
      IssueStage<T>(p, schedule, it, it, images, image_bytes);
    } else {
      CommitAsyncCopies();
    }
  }
  StageParamsOf<P>(s, team, params);
  // The edges of this thread's row of the next iteration, one row ahead.
  StagedEdges<T> edges{};
  if (schedule.iterations > 0) {
    const int64_t row = schedule.FirstRowOf(0) + team.group;
    if (row < p.total_rows) edges = LoadEdges(StagedRow<T>(s, row), s.hidden, team);
  }

  for (int it = 0; it < schedule.iterations; ++it) {
    const int stage = it % kStagedStages;
    // This iteration's group is the oldest of the kStagedStages pending.
    WaitAsyncCopies<kStagedStages - 1>();
    const int64_t row = schedule.FirstRowOf(it) + team.group;
    const bool active = row < p.total_rows;
    const T* x = StagedRow<T>(s, active ? row : 0);
    const StagedImage<T> image = ImageOf(
        x, images + static_cast<uint32_t>(stage * schedule.groups + team.group) * image_bytes,
        row_bytes);
    // No copy writes the edges' places: they are written before the barrier
    // that shows the row to the whole team.
    if (active) WriteEdges(image, edges, s.hidden, team);
    __syncthreads();
    const int64_t next_row =
        it + 1 < schedule.iterations ? schedule.FirstRowOf(it + 1) + team.group : p.total_rows;
    if (next_row < p.total_rows) {
      edges = LoadEdges(StagedRow<T>(s, next_row), s.hidden, team);
    }
    // Every thread of the block reaches the reductions, active row or not.
    const RowStats stats = StagedRowStatistics<T>(image, active ? s.hidden : 0, s.hidden, s.epsilon,
                                                  kLayerNorm, team, scratch, (it & 1) * 2);
    if (active) {
      T* out = static_cast<T*>(s.out) + row * s.out_stride;
      WithAffine<kLayerNorm>(s, [&](auto gamma, auto beta) {
        WriteStagedRow<T, P, kLayerNorm, decltype(gamma)::value, decltype(beta)::value>(
            s, image, params, out, stats, team);
      });
      if (team.rank == 0) {
        if (s.mean != nullptr) s.mean[row] = stats.mean_hi + stats.mean_lo;
        if (s.rstd != nullptr) s.rstd[row] = stats.rstd;
      }
    }
    // Every thread is done with this stage: refill it with the rows
    // kStagedStages iterations ahead.
    __syncthreads();
    if (it + kStagedStages < schedule.iterations) {
      IssueStage<T>(p, schedule, it + kStagedStages, stage, images, image_bytes);
    } else {
      CommitAsyncCopies();
    }
  }
}

template <typename T, typename P>
__global__ void __launch_bounds__(kLeanMaxThreads, kStagedMinBlocks)
    ForwardStagedKernel(const __grid_constant__ ForwardParams p) {
  BeginDependentGrid();
  extern __shared__ __align__(128) unsigned char staged_images[];
  __shared__ ReduceScratch scratch;
  if (p.op == static_cast<uint8_t>(NormOp::kLayerNorm)) {
    StagedRows<T, P, true>(p, staged_images, scratch);
  } else {
    StagedRows<T, P, false>(p, staged_images, scratch);
  }
}

}  // namespace normsvc::kernels::detail
