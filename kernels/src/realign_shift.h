// The word shifting behind the realigning forward kernel
// (forward_realign_kernel.cuh): a 16- or 32-byte chunk that starts part way
// into one aligned chunk and ends in the next, taken out of the two. Host
// and device code, so that the CPU tests check it on every build.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NORMSVC_HOST_DEVICE __host__ __device__
#else
#define NORMSVC_HOST_DEVICE
#endif
// Unrolled in device code (a host compiler may not know the pragma).
#if defined(__CUDA_ARCH__)
#define NORMSVC_UNROLL _Pragma("unroll")
#else
#define NORMSVC_UNROLL
#endif

namespace normsvc::kernels::detail {

// The low 32 bits of (hi:lo) >> (shift & 31): the device's funnel shift.
NORMSVC_HOST_DEVICE inline uint32_t FunnelShiftRight(uint32_t lo, uint32_t hi, unsigned shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, shift);
#else
  const uint64_t both = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<uint32_t>(both >> (shift & 31u));
#endif
}

// Bytes [byte_shift, byte_shift + 4 * kWords) of the 8 * kWords bytes
// lo ++ hi (little-endian words), for 0 <= byte_shift < 4 * kWords and
// byte_shift even: a barrel shift over whole words by selects (no indexing
// by a runtime value, so no local memory on the device), then a funnel
// shift for a remaining half word.
template <int kWords>
NORMSVC_HOST_DEVICE inline void ShiftWords(const uint32_t (&lo)[kWords],
                                           const uint32_t (&hi)[kWords], int byte_shift,
                                           uint32_t (&out)[kWords]) {
  uint32_t w[2 * kWords];
  NORMSVC_UNROLL
  for (int i = 0; i < kWords; ++i) {
    w[i] = lo[i];
    w[kWords + i] = hi[i];
  }
  const int word_shift = byte_shift >> 2;
  const unsigned bit_shift = static_cast<unsigned>(byte_shift & 3) * 8u;
  NORMSVC_UNROLL
  for (int step = 1; step < kWords; step <<= 1) {
    const bool take = (word_shift & step) != 0;
    NORMSVC_UNROLL
    for (int i = 0; i + step < 2 * kWords; ++i) w[i] = take ? w[i + step] : w[i];
  }
  NORMSVC_UNROLL
  for (int i = 0; i < kWords; ++i) out[i] = FunnelShiftRight(w[i], w[i + 1], bit_shift);
}

}  // namespace normsvc::kernels::detail
