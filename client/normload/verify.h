// Checks one response against the expected answer prepared for its request
// (the CPU reference's, or the input itself for the echo server).
//
// Tolerances, |got - want| <= atol + rtol * |want| by output dtype:
//   fp32 1e-4 + 1e-4 |want|; fp16 1e-3 + 2e-3 |want|; bf16 8e-3 + 1.6e-2 |want|
// (about two units in the last place of the 16-bit formats: the server
// accumulates in fp32, the reference in double, and both round once).
// Statistics (fp32) use the fp32 bound; grad_gamma/grad_beta, sums over all
// rows, the fp32 bound plus 2e-4 x the column's sum of the terms' magnitudes
// (|dy * xhat|, |dy|): a fp32 sum's rounding grows so, while leaving out or
// repeating a row moves the sum by a whole term. Every tensor's dtype, shape
// and size are checked too.
#pragma once

#include <string>

#include "normsvc/v1/normalizer.pb.h"
#include "workload.h"

namespace normsvc::normload {

// Empty when the response matches; else a description of the first mismatch.
std::string CheckForwardResponse(const PreparedKind& kind, const Variant& variant,
                                 const v1::NormalizeResponse& response, bool echo);
std::string CheckBackwardResponse(const PreparedKind& kind, const Variant& variant,
                                  const v1::NormalizeBackwardResponse& response);

}  // namespace normsvc::normload
