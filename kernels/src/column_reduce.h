// Stage 2 of the backward pass: dgamma / dbeta from the row pass's rows of
// fp32 partials, reduced over units in a fixed order (no atomics).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernel_params.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

// dgamma / dbeta (those `args` requests) from the `units` rows of partials
// at params' dgamma_partial / dbeta_partial. Every kernel adds column c as
// sum over slices s in order of (sum over u = s, s + S, s + 2S, ... < units
// in order of partial[u][c]), S = ColumnReduceSlices(units), each sum
// starting from +0: the bits depend on the partials and the unit count
// alone, not on the kernel that takes the launch.
Status LaunchColumnReduction(const BackwardArgs& args, const BackwardParams& params, int64_t units,
                             cudaStream_t stream);

// Which kernels LaunchColumnReduction uses (process-wide; for A/B runs,
// norm_bench --column-reduce, and for tests that compare them): kAuto the
// wide kernel where WideColumnReduction(hidden) says so and the narrow ones
// elsewhere, kNarrow the narrow ones everywhere, kWide the wide one wherever
// it applies (hidden % 4 == 0).
enum class ColumnReduceForm { kAuto, kNarrow, kWide };
ColumnReduceForm GetColumnReduceForm();
void SetColumnReduceForm(ColumnReduceForm form);

// Whether the reductions drop the partials' lines from the L2 once added
// where DiscardsPartials(hidden) says so (launch_plan.h): process-wide,
// default true; false drops none (A/B runs: norm_bench --discard-partials
// off). Either way the bits are the same.
bool GetDiscardPartials();
void SetDiscardPartials(bool discard);
// Launches of the wide kernel so far in this process (for tests: proof that
// a case took it).
int64_t WideColumnReductionLaunches();

}  // namespace normsvc::kernels::detail
