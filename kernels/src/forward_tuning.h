// Switches for forward-kernel changes that are built and tested but not yet
// measured on the target GPU. Each one changes only how rows are moved
// through memory, never a result bit (the GPU tests compare both settings
// bit for bit), so they can be compared on the benchmark in one run
// (norm_bench --tuning) before one becomes the default. Process-wide; the
// defaults are the measured behaviour.
#pragma once

#include <cstdint>

namespace normsvc::kernels::detail {

struct ForwardTuning {
  // One-segment launches of the vector layout with four chunks a thread and
  // more row groups than fit on the device take ForwardRingKernel.
  bool ring = false;
  // The specialized kernel prefetches gamma/beta into L1 before the row
  // statistics (ForwardParams::prefetch_params).
  bool prefetch_params = false;
};

ForwardTuning GetForwardTuning();
void SetForwardTuning(const ForwardTuning& tuning);

// Launches of ForwardRingKernel so far in this process (for tests: proof
// that a case took the ring).
int64_t RingForwardLaunches();

}  // namespace normsvc::kernels::detail
