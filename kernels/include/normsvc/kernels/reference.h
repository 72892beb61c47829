// The CPU reference: the definition of the right answer, and the server's
// CPU backend. Double-precision accumulation; results rounded once to the
// output dtype. Same shape of API as the GPU launchers (gpu.h), on host
// pointers. Multithreaded over rows; thread-safe (no shared state).
#pragma once

#include <vector>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels {

struct ReferenceOptions {
  // Worker threads for large inputs; 0 means std::thread::hardware_concurrency().
  int max_threads = 0;
};

// Normalizes every segment. Returns kInvalidArgument for a malformed segment
// (nothing is written then for that segment or any after it).
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
