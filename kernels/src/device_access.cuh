// Element conversions and memory accesses shared by the kernels.
//
// A chunk is W contiguous elements of one row. With `vectorized` set, the
// caller guarantees the chunk's address is aligned to the chunk's byte size
// (or 16 bytes when larger), and a chunk is moved with 8/16-byte accesses;
// otherwise it is moved element by element. Both give the same values, so
// alignment never changes a result's bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

// The DType of elements of type T.
template <typename T>
constexpr DType DTypeOfElement() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, __half>) return DType::kF16;
  return DType::kBF16;
}

template <typename T, int W>
struct alignas(sizeof(T) * W) Pack {
  T e[W];
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Element j of a pack as fp32. A bf16 pair is read from its 32-bit word: the
// low element is the word shifted up 16 bits, the high one the word with its
// low 16 bits cleared; that is the exact fp32 value, as __bfloat162float
// gives it, in one instruction and without splitting the word into halves.
template <typename T, int W>
__device__ __forceinline__ float PackElement(const Pack<T, W>& pack, int j) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && W % 2 == 0) {
    const uint32_t word = reinterpret_cast<const uint32_t*>(&pack)[j / 2];
    return __uint_as_float(j % 2 == 0 ? word << 16 : word & 0xffff0000u);
  } else {
    return ToFloat(pack.e[j]);
  }
}

// Activations are read and written once: streaming (evict-first) accesses
// keep them from pushing gamma/beta and the segment table out of the caches.
__device__ __forceinline__ float LoadStreaming(const float* p) { return __ldcs(p); }
__device__ __forceinline__ __half LoadStreaming(const __half* p) {
  return __ushort_as_half(__ldcs(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ __nv_bfloat16 LoadStreaming(const __nv_bfloat16* p) {
  return __ushort_as_bfloat16(__ldcs(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ void StoreStreaming(float* p, float v) { __stcs(p, v); }
__device__ __forceinline__ void StoreStreaming(__half* p, __half v) {
  __stcs(reinterpret_cast<unsigned short*>(p), __half_as_ushort(v));
}
__device__ __forceinline__ void StoreStreaming(__nv_bfloat16* p, __nv_bfloat16 v) {
  __stcs(reinterpret_cast<unsigned short*>(p), __bfloat16_as_ushort(v));
}

// +0.0 in every element (all bits clear in fp32, fp16 and bf16), written as
// whole 32-bit words where the pack allows: a select between a loaded pack
// and zero then stays a select of words, not of 16-bit halves.
template <typename T, int W>
__device__ __forceinline__ void ZeroPack(Pack<T, W>& pack) {
  if constexpr (sizeof(Pack<T, W>) % 4 == 0) {
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(Pack<T, W>) / 4); ++i) {
      reinterpret_cast<uint32_t*>(&pack)[i] = 0u;
    }
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j) pack.e[j] = FromFloat<T>(0.0f);
  }
}

// Moves a Pack of 8, 16 or 32 bytes with vector accesses.
template <typename T, int W>
__device__ __forceinline__ void LoadPackVector(const T* p, Pack<T, W>& pack) {
  constexpr int kBytes = static_cast<int>(sizeof(T)) * W;
  if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(&pack) = __ldcs(reinterpret_cast<const uint2*>(p));
  } else {
    static_assert(kBytes % 16 == 0, "vector packs are 8 or a multiple of 16 bytes");
#pragma unroll
    for (int q = 0; q < kBytes / 16; ++q) {
      reinterpret_cast<uint4*>(&pack)[q] = __ldcs(reinterpret_cast<const uint4*>(p) + q);
    }
  }
}

template <typename T, int W>
__device__ __forceinline__ void StorePackVector(T* p, const Pack<T, W>& pack) {
  constexpr int kBytes = static_cast<int>(sizeof(T)) * W;
  if constexpr (kBytes == 8) {
    __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(&pack));
  } else {
    static_assert(kBytes % 16 == 0, "vector packs are 8 or a multiple of 16 bytes");
#pragma unroll
    for (int q = 0; q < kBytes / 16; ++q) {
      __stcs(reinterpret_cast<uint4*>(p) + q, reinterpret_cast<const uint4*>(&pack)[q]);
    }
  }
}

// Elements of chunk `chunk` (W elements each) inside a row of `hidden`: W for
// every chunk but a partial last one, 0 past the row.
template <int W>
__device__ __forceinline__ int ChunkElements(int chunk, int hidden) {
  const int left = hidden - chunk * W;
  return left >= W ? W : (left > 0 ? left : 0);
}

template <typename T, int W>
__device__ __forceinline__ Pack<T, W> LoadChunk(const T* p, bool vectorized) {
  Pack<T, W> pack;
  if constexpr (sizeof(T) * W >= 8) {
    if (vectorized) {
      LoadPackVector<T, W>(p, pack);
      return pack;
    }
  }
#pragma unroll
  for (int j = 0; j < W; ++j) pack.e[j] = LoadStreaming(p + j);
  return pack;
}

template <typename T, int W>
__device__ __forceinline__ void StoreChunk(T* p, const Pack<T, W>& pack, bool vectorized) {
  if constexpr (sizeof(T) * W >= 8) {
    if (vectorized) {
      StorePackVector<T, W>(p, pack);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < W; ++j) StoreStreaming(p + j, pack.e[j]);
}

// A row's last chunk may be partial (launch_plan.h): only its first
// `elements` (1..W) lie in the row. LoadPartialChunk reads those and zeroes
// the rest; StorePartialChunk writes those alone. A whole chunk takes
// LoadChunk / StoreChunk.
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> LoadPartialChunk(const T* p, bool vectorized, int elements) {
  if (elements >= W) return LoadChunk<T, W>(p, vectorized);
  Pack<T, W> pack;
  ZeroPack(pack);
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (j < elements) pack.e[j] = LoadStreaming(p + j);
  }
  return pack;
}

template <typename T, int W>
__device__ __forceinline__ void StorePartialChunk(T* p, const Pack<T, W>& pack, bool vectorized,
                                                  int elements) {
  if (elements >= W) {
    StoreChunk<T, W>(p, pack, vectorized);
    return;
  }
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (j < elements) StoreStreaming(p + j, pack.e[j]);
  }
}

template <typename O, int W>
__device__ __forceinline__ void StoreFloats(O* p, const float (&y)[W], bool vectorized,
                                            int elements) {
  Pack<O, W> pack;
#pragma unroll
  for (int j = 0; j < W; ++j) pack.e[j] = FromFloat<O>(y[j]);
  StorePartialChunk<O, W>(p, pack, vectorized, elements);
}

// Writes the first `elements` of W floats at element `index` of a row of
// runtime dtype `dtype` (all W for a whole chunk).
template <int W>
__device__ __forceinline__ void StoreOutput(void* row, uint8_t dtype, int64_t index,
                                            const float (&y)[W], bool vectorized,
                                            int elements = W) {
  switch (static_cast<DType>(dtype)) {
    case DType::kF32:
      StoreFloats<float, W>(static_cast<float*>(row) + index, y, vectorized, elements);
      break;
    case DType::kF16:
      StoreFloats<__half, W>(static_cast<__half*>(row) + index, y, vectorized, elements);
      break;
    case DType::kBF16:
      StoreFloats<__nv_bfloat16, W>(static_cast<__nv_bfloat16*>(row) + index, y, vectorized,
                                    elements);
      break;
  }
}

// Parameters (gamma, beta) are shared by every row: read-only cached loads.
// A row's partial last chunk (`elements` < W) reads only its elements; the
// rest of `v` is zero.
template <typename P, int W>
__device__ __forceinline__ void LoadParamsAs(const P* p, bool vectorized, float (&v)[W],
                                             int elements = W) {
  if (elements < W) {
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] = j < elements ? ToFloat(p[j]) : 0.0f;
    return;
  }
  Pack<P, W> pack;
  constexpr int kBytes = static_cast<int>(sizeof(P)) * W;
  if constexpr (kBytes >= 16) {
    if (vectorized) {
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q) {
        reinterpret_cast<uint4*>(&pack)[q] = __ldg(reinterpret_cast<const uint4*>(p) + q);
      }
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = PackElement(pack, j);
      return;
    }
  }
  if constexpr (kBytes == 8) {
    if (vectorized) {
      *reinterpret_cast<uint2*>(&pack) = __ldg(reinterpret_cast<const uint2*>(p));
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = PackElement(pack, j);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < W; ++j) v[j] = ToFloat(p[j]);
}

// Reads W parameters at element `index` (the first `elements` of them, the
// rest zero); `param_dtype` is fp32 or T.
template <typename T, int W>
__device__ __forceinline__ void LoadParams(const void* base, uint8_t param_dtype, int64_t index,
                                           bool vectorized, float (&v)[W], int elements = W) {
  if (static_cast<DType>(param_dtype) == DType::kF32) {
    LoadParamsAs<float, W>(static_cast<const float*>(base) + index, vectorized, v, elements);
  } else {
    LoadParamsAs<T, W>(static_cast<const T*>(base) + index, vectorized, v, elements);
  }
}

}  // namespace normsvc::kernels::detail
