// Host arrays of random values for the benchmarks (CUDA-free, so that the
// CPU reference's benchmark shares it with norm_bench).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/types.h"

namespace normsvc::bench {

// `elements` values of `dtype` drawn uniformly from [lo, hi) by a xorshift
// generator seeded with `seed` (never zeros: zeros can run faster than real
// data).
inline std::vector<uint8_t> RandomHostArray(kernels::DType dtype, int64_t elements, float lo,
                                            float hi, uint64_t seed) {
  std::vector<uint8_t> bytes(static_cast<std::size_t>(elements) * kernels::DTypeSize(dtype));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < elements; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float u = static_cast<float>(state >> 40) / static_cast<float>(1 << 24);
    kernels::StoreFromFloat(bytes.data(), dtype, i, lo + (hi - lo) * u);
  }
  return bytes;
}

}  // namespace normsvc::bench
