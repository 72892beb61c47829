// The one place where statuses change representation:
//   kernels::Status -> absl::Status  (inside the server)
//   absl::Status    -> grpc::Status  (at the RPC boundary)
// and where a status code gets its metric label name.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "normsvc/kernels/types.h"

namespace normsvc::server {

absl::Status FromKernelStatus(const kernels::Status& status);
grpc::Status ToGrpcStatus(const absl::Status& status);

// Canonical upper-case name of a status code ("OK", "INVALID_ARGUMENT", ...);
// the values of the `code` metric label.
const char* StatusCodeName(absl::StatusCode code);
inline constexpr int kStatusCodeCount = 17;  // OK .. UNAUTHENTICATED

}  // namespace normsvc::server
