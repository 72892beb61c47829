// The CPU reference as it was before its rewrite for speed: same functions,
// same semantics, in namespace legacy. Test-only; reference_equivalence_test
// checks that the library's reference matches it byte for byte.
#pragma once

#include "normsvc/kernels/reference.h"

namespace normsvc::kernels::legacy {

Status ReferenceForward(const ForwardSegment* segments, int count,
                        const ReferenceOptions& options = {});
Status ReferenceBackward(const BackwardArgs& args, const ReferenceOptions& options = {});
RowResult ReferenceForwardRow(NormOp op, const double* x, const double* residual,
                              const double* gamma, const double* beta, int64_t hidden,
                              double epsilon);

}  // namespace normsvc::kernels::legacy
