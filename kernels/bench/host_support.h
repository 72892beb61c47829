// The benchmarks' CUDA-free helpers (norm_bench and the CPU reference's
// reference_bench share them): status checks and random host arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/types.h"

namespace normsvc::bench {

// Exits with a message naming `what` when `st` is an error.
inline void CheckStatus(const kernels::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s failed: %s\n", what, st.message().c_str());
    std::exit(1);
  }
}

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
