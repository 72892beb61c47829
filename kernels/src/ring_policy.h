// Which one-segment launches take ForwardRingKernel (forward_ring_kernel.cuh).
// The ring changes only how rows move through memory, never a result bit
// (the GPU tests compare it with the register kernel bit for bit), so the
// choice is a speed policy, measured per plan shape on the H200
// (BENCHMARKS.md, round 9): the ring is faster only where a row spans a
// cluster of two blocks. Process-wide; norm_bench --ring and the tests set
// it, nothing else does.
#pragma once

#include <cstdint>

namespace normsvc::kernels::detail {

enum class RingPolicy : uint8_t {
  kOff,               // never
  kTwoBlockClusters,  // plans whose row spans two blocks (the default)
  kEveryPlan,         // every plan UsesRingForward accepts (for tests and A/B runs)
};

RingPolicy GetRingPolicy();
void SetRingPolicy(RingPolicy policy);

// Launches of ForwardRingKernel so far in this process (for tests: proof
// that a case took the ring).
int64_t RingForwardLaunches();

}  // namespace normsvc::kernels::detail
