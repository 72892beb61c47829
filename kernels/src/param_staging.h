// Which one-segment launches take the forward kernel that stages gamma/beta
// in shared memory (ForwardLeanKernel's kStageParams, forward_lean_kernel.cuh).
// Staging changes only when the parameters arrive, never a result bit (the
// GPU tests compare small launches with the multi-segment kernel and long
// ones with the unstaged kernel, bit for bit), so the choice is a speed
// policy. Process-wide; norm_bench
// --param_staging and the tests set it, nothing else does.
#pragma once

#include <cstdint>

namespace normsvc::kernels::detail {

enum class ParamStaging : uint8_t {
  kOff,      // never
  kOneWave,  // launches whose blocks all fit on the device at once
  // kOneWave's launches, and longer ones whose plan StagesMultiWaveLaunch
  // names (kernel_registry.h): the default.
  kMultiWarpRows,
  // Every launch it serves, a block a row group (a tuning experiment:
  // norm_bench --param_staging every-launch).
  kEveryLaunch,
};

ParamStaging GetParamStaging();
void SetParamStaging(ParamStaging policy);

// Launches that staged their parameters so far in this process (for tests:
// proof that a case took that kernel).
int64_t ParamStagedForwardLaunches();

}  // namespace normsvc::kernels::detail
