// Rows off a 16-byte boundary as the aligned 16-byte words they lie across
// (BackwardRealignKernel, backward_realign_kernel.cuh): which elements of a
// word are the row's, loading and storing a word, and the per-thread words
// of gamma and the dgamma/dbeta accumulators in shared memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "device_access.cuh"
#include "launch_plan.h"

namespace normsvc::kernels::detail {

// The elements [lo, hi) of a word that lie in the row: [0, W) for an
// interior word, part of it for a row's first and last words (which its
// neighbours share), none past the row.
struct WordSpan {
  int lo;
  int hi;
  __device__ __forceinline__ bool Whole(int width) const { return lo == 0 && hi == width; }
  __device__ __forceinline__ bool Holds(int j) const { return j >= lo && j < hi; }
};

template <typename T, int W>
__device__ __forceinline__ Pack<T, W> LoadWord(const T* word, const WordSpan& span) {
  Pack<T, W> pack;
  if (span.Whole(W)) {
    LoadPackVector<T, W>(word, pack);
    return pack;
  }
  ZeroPack(pack);
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (span.Holds(j)) pack.e[j] = LoadStreaming(word + j);
  }
  return pack;
}

// A word of the rows in flight, as its raw 32-bit lanes: one 16-byte load
// when `whole_in_tensor` (the aligned word lies wholly within the tensor's
// rows, as every word of a row but the first row's first word and the last
// row's last word does), else element by element over `span` (zeros
// elsewhere). The 16-byte load is predicated inline PTX writing the lanes
// in place: nothing consumes it until the row is computed, so the load of
// the next row stays in flight meanwhile. Built as a Pack of 16-bit
// elements, the compiler moved its halves with byte permutes right after
// the load, which waited for it there (round 21 in kernels/BENCHMARKS.md).
// Elements of the word outside `span` (a neighbour row's, or padding) are
// then whatever lies there: RowElementsOnly clears them before use.
template <typename T, int W>
__device__ __forceinline__ uint4 LoadRawWord(const T* word, const WordSpan& span,
                                             bool whole_in_tensor) {
  uint4 raw = make_uint4(0u, 0u, 0u, 0u);
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
      "@p ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%5];\n\t}"
      : "+r"(raw.x), "+r"(raw.y), "+r"(raw.z), "+r"(raw.w)
      : "r"(static_cast<int>(whole_in_tensor)), "l"(word));
  if (!whole_in_tensor && span.hi > span.lo) {
    const Pack<T, W> pack = LoadWord<T, W>(word, span);
    raw = reinterpret_cast<const uint4&>(pack);
  }
  return raw;
}

// `raw` with the elements outside `span` cleared (zero bits: +0).
template <typename T, int W>
__device__ __forceinline__ uint4 RowElementsOnly(uint4 raw, const WordSpan& span) {
  static_assert(sizeof(T) * W == 16, "a word is 16 bytes");
  constexpr int kPerLane = W / 4;  // elements in a 32-bit lane
  constexpr int kBits = 32 / kPerLane;
  auto keep = [&](int q) {
    uint32_t mask = 0u;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const uint32_t bits = kBits == 32 ? 0xffffffffu : ((1u << (kBits % 32)) - 1u) << (e * kBits);
      if (span.Holds(q * kPerLane + e)) mask |= bits;
    }
    return mask;
  };
  raw.x &= keep(0);
  raw.y &= keep(1);
  raw.z &= keep(2);
  raw.w &= keep(3);
  return raw;
}

template <typename T, int W>
__device__ __forceinline__ void StoreWord(T* word, const Pack<T, W>& pack, const WordSpan& span) {
  if (span.Whole(W)) {
    StorePackVector<T, W>(word, pack);
    return;
  }
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (span.Holds(j)) StoreStreaming(word + j, pack.e[j]);
  }
}

// kWhole: every element of the word lies in the row (no tests); otherwise
// the elements outside `span` take no part: they are zero in the packs and
// left out of every sum and accumulator.
template <bool kWhole, int W>
__device__ __forceinline__ bool InRow(const WordSpan& span, int j) {
  if constexpr (kWhole) {
    return true;
  } else {
    return span.Holds(j);
  }
}

// W floats a word of each thread of the block (gamma of its columns, its
// dgamma / dbeta accumulators), kept in shared memory rather than registers
// so that the registers hold the rows' words: W / 4 float4 a word,
// [slot][quarter][thread], so a warp's 16-byte accesses are consecutive (no
// bank conflicts) and no thread touches another's.
template <int K, int W>
struct ThreadWords {
  float4* base;

  __device__ __forceinline__ float4* At(int k, int q) const {
    return base + (k * (W / 4) + q) * static_cast<int>(blockDim.x) + threadIdx.x;
  }
  __device__ __forceinline__ void Load(int k, float (&v)[W]) const {
#pragma unroll
    for (int q = 0; q < W / 4; ++q) {
      const float4 f = *At(k, q);
      v[4 * q] = f.x;
      v[4 * q + 1] = f.y;
      v[4 * q + 2] = f.z;
      v[4 * q + 3] = f.w;
    }
  }
  __device__ __forceinline__ void Store(int k, const float (&v)[W]) const {
#pragma unroll
    for (int q = 0; q < W / 4; ++q) {
      *At(k, q) = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    }
  }
  // The floats ThreadWords of a block of `threads` threads take.
  static constexpr int64_t Floats(int threads) { return int64_t{K} * W * threads; }
};

// Calls body(k, whole) for each of the thread's K words that holds part of
// the row: `whole` is std::true_type for a word wholly in the row (its code
// has no per-element tests), else std::false_type.
template <int K, int W, typename Body>
__device__ __forceinline__ void ForEachWordInRow(const WordSpan (&span)[K], Body&& body) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (span[k].Whole(W)) {
      body(k, std::true_type{});
    } else if (span[k].hi > span[k].lo) {
      body(k, std::false_type{});
    }
  }
}

// The rows in flight of a BackwardRealignKernel block (RealignRingBytes in
// launch_plan.h): per stage, each thread's K words of x and of dy
// ([stage][x | dy][k][thread] uint4, a warp's 16-byte slots consecutive),
// then per stage one (mean, rstd) a warp ([stage][warp] float2).
template <int K>
struct RealignRing {
  uint4* base;
  int threads;

  __device__ __forceinline__ uint4* Slot(int stage, int tensor, int k) const {
    return base + ((stage * 2 + tensor) * K + k) * threads + threadIdx.x;
  }
  __device__ __forceinline__ float2* Stats(int stage, int warp) const {
    return reinterpret_cast<float2*>(base + kRealignStages * 2 * K * threads) +
           stage * (threads / 32) + warp;
  }
  static constexpr int64_t Floats(int threads) {
    return static_cast<int64_t>(RealignRingBytes(K, threads) / sizeof(float));
  }
};

}  // namespace normsvc::kernels::detail
