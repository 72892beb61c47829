// The CPU reference: the definition of the right answer, and the server's
// CPU backend. Double-precision accumulation; each result is rounded to fp32
// and, for a 16-bit output, from there to the 16-bit dtype
// (StoreFromDouble), as the GPU kernels, which compute in fp32, round their
// results. That is the correctly rounded value except where the fp32 value
// falls exactly halfway between two 16-bit values (then it may be the other
// neighbour: one unit in the last place). dgamma and dbeta have the same
// bits for every thread count and host. Same shape of API as the GPU
// launchers (gpu.h), on host pointers. Multithreaded over rows; thread-safe
// (no shared state).
//
// Where the two backends part beyond rounding: a row whose fp32 sum of
// squares overflows (|x - mean| or |x| above about 1.8e19, which fp32 and
// bf16 inputs can hold). The GPU kernels accumulate in fp32, as PyTorch's
// do: their variance is infinite, rstd 0, and the row's output is beta (0
// without). Here, in double, the row normalizes to finite values. Requests
// with such rows get different answers from the CPU and the CUDA backends.
#pragma once

#include <vector>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels {

struct ReferenceOptions {
  // Worker threads for large inputs; 0 means std::thread::hardware_concurrency().
  int max_threads = 0;
};

// Normalizes every segment. Returns kInvalidArgument for a malformed call
// (ValidateForwardSegments; nothing is written then).
Status ReferenceForward(const ForwardSegment* segments, int count,
                        const ReferenceOptions& options = {});

// dx, dgamma, dbeta as documented on BackwardArgs, in double internally.
Status ReferenceBackward(const BackwardArgs& args, const ReferenceOptions& options = {});

// Double-precision oracle for tests: one row, no rounding of the result.
// `x` and `residual` (optional) are already-decoded values of length hidden;
// gamma/beta optional. Returns y in double and the statistics.
struct RowResult {
  std::vector<double> y;
  std::vector<double> sum;  // x + residual
  double mean = 0.0;
  double rstd = 0.0;
};
RowResult ReferenceForwardRow(NormOp op, const double* x, const double* residual,
                              const double* gamma, const double* beta, int64_t hidden,
                              double epsilon);

}  // namespace normsvc::kernels
