// Per-thread cache of gamma and beta in shared memory for the persistent
// forward kernel.
//
// A thread normalizes the same columns of every row it handles, so it keeps
// its own chunks of gamma and beta (raw, in the parameter dtype) in its own
// shared-memory slots and reloads them only when a row's segment has other
// parameters. Without it, every chunk of every row waited for a global load
// of gamma and beta issued after the previous chunk's store: V round trips to
// L2 per row, which bounded throughput by latency (H200, 2026-11-30: 35-50% of
// copy). Each thread reads only the slots it wrote: no barrier is needed.
#pragma once

#include <cstdint>

#include "device_access.cuh"
#include "kernel_params.h"

namespace normsvc::kernels::detail {

// Bytes of dynamic shared memory for `slots` chunks of `width` parameters of
// `param_bytes` each, gamma and beta, for every thread of the block.
__host__ __device__ constexpr std::size_t ParamCacheBytes(int slots, int width, int param_bytes,
                                                          int block_threads) {
  return static_cast<std::size_t>(slots) * 2 * width * param_bytes * block_threads;
}

struct ParamCache {
  uint8_t* base;  // the block's dynamic shared memory
  const void* gamma;
  const void* beta;
  int hidden;
  uint8_t dtype;
  int pack_bytes;  // width * parameter size of the cached segment

  // Slot of chunk slot k for gamma (which = 0) or beta (which = 1).
  __device__ __forceinline__ uint8_t* Slot(int k, int which) const {
    return base + (static_cast<std::size_t>(k * 2 + which) * blockDim.x + threadIdx.x) * pack_bytes;
  }
};

__device__ __forceinline__ ParamCache EmptyParamCache(uint8_t* base) {
  ParamCache c;
  c.base = base;
  c.gamma = nullptr;
  c.beta = nullptr;
  c.hidden = -1;
  c.dtype = 0xff;
  c.pack_bytes = 0;
  return c;
}

// Copies a chunk of W parameters of which the first `elements` lie in the
// row; the slot's other elements are zero.
template <typename P, int W>
__device__ __forceinline__ void CopyParamPack(const P* src, uint8_t* dst, bool vectorized,
                                              int elements) {
  if (elements < W) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
      reinterpret_cast<P*>(dst)[j] = j < elements ? src[j] : P(0.0f);
    }
    return;
  }
  constexpr int kBytes = static_cast<int>(sizeof(P)) * W;
  if constexpr (kBytes % 16 == 0) {
    if (vectorized) {
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q) {
        reinterpret_cast<uint4*>(dst)[q] = __ldg(reinterpret_cast<const uint4*>(src) + q);
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < W; ++j) reinterpret_cast<P*>(dst)[j] = src[j];
}

// Makes the cache hold segment s's parameters for this thread's chunks.
template <typename T, int V, int W>
__device__ __forceinline__ void RefreshParamCache(ParamCache& c, const DeviceSegment& s,
                                                  int row_threads, int rank) {
  if (c.gamma == s.gamma && c.beta == s.beta && c.hidden == s.hidden && c.dtype == s.param_dtype) {
    return;
  }
  const bool fp32 = static_cast<DType>(s.param_dtype) == DType::kF32;
  c.gamma = s.gamma;
  c.beta = s.beta;
  c.hidden = s.hidden;
  c.dtype = s.param_dtype;
  c.pack_bytes = W * (fp32 ? 4 : static_cast<int>(sizeof(T)));
  const int chunks = (s.hidden + W - 1) / W;  // the last may be partial
  const bool vectorized = s.vectorized != 0;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int chunk = k * row_threads + rank;
    if (chunk >= chunks) continue;
    const int64_t index = static_cast<int64_t>(chunk) * W;
    const int elements = ChunkElements<W>(chunk, s.hidden);
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const void* src = which == 0 ? s.gamma : s.beta;
      if (src == nullptr) continue;
      if (fp32) {
        CopyParamPack<float, W>(static_cast<const float*>(src) + index, c.Slot(k, which),
                                vectorized, elements);
      } else {
        CopyParamPack<T, W>(static_cast<const T*>(src) + index, c.Slot(k, which), vectorized,
                            elements);
      }
    }
  }
}

template <typename P, int W>
__device__ __forceinline__ void ReadParamPack(const uint8_t* slot, float (&v)[W]) {
  Pack<P, W> pack;
  constexpr int kBytes = static_cast<int>(sizeof(P)) * W;
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int q = 0; q < kBytes / 16; ++q) {
      reinterpret_cast<uint4*>(&pack)[q] = reinterpret_cast<const uint4*>(slot)[q];
    }
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j) pack.e[j] = reinterpret_cast<const P*>(slot)[j];
  }
#pragma unroll
  for (int j = 0; j < W; ++j) v[j] = PackElement(pack, j);
}

// Parameters of chunk slot k (gamma: which = 0, beta: which = 1) as floats.
template <typename T, int W>
__device__ __forceinline__ void ReadCachedParams(const ParamCache& c, int k, int which,
                                                 float (&v)[W]) {
  if (static_cast<DType>(c.dtype) == DType::kF32) {
    ReadParamPack<float, W>(c.Slot(k, which), v);
  } else {
    ReadParamPack<T, W>(c.Slot(k, which), v);
  }
}

}  // namespace normsvc::kernels::detail
