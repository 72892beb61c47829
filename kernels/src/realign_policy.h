// Which kernel serves the launches of ForwardPath::kRealign without a
// residual (one segment, or a group of a multi-segment launch, whose key
// keeps segments with a residual apart): ForwardRealignStagedKernel (rows
// staged in shared memory, read at their offset;
// forward_realign_staged_kernel.cuh; the default) or ForwardRealignKernel
// (aligned chunks shifted in registers), which serves every other
// realigning launch either way. Both give the same bits (the GPU tests
// compare them), so the choice is a speed policy: measured on an H100
// (BENCHMARKS.md, round 38), the staged kernel gained 0.12-0.17 of copy at
// bf16 and fp32 8189 x 2049 and 4095, and 0.10-0.12 at bf16 8191; for a
// batch of 64 segments of 128 x 2049 bf16, 66 us against 83 us (round 40).
// Process-wide; norm_bench --realign and the tests set it, nothing else
// does.
#pragma once

#include <cstdint>

namespace normsvc::kernels::detail {

enum class RealignPolicy : uint8_t {
  kShift,   // ForwardRealignKernel
  kStaged,  // ForwardRealignStagedKernel where it applies (the default)
};

RealignPolicy GetRealignPolicy();
void SetRealignPolicy(RealignPolicy policy);

// The stages of ForwardRealignStagedKernel's pipeline: the row group
// normalized and one loading. The kernel takes the count as a template
// parameter; 3 and 4 lost 0.01-0.06 of copy at every realigned shape on an
// H100 (kernels/BENCHMARKS.md, rounds 39-41), so only 2 is compiled.
inline constexpr int kRealignForwardStages = 2;

// Launches of ForwardRealignStagedKernel so far in this process (for tests:
// proof that a case took it).
int64_t StagedRealignForwardLaunches();

}  // namespace normsvc::kernels::detail
