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

// The status a client sees. Its message travels in a response header, whose
// size the client limits (16 KiB by default in gRPC): a longer message,
// which may echo a client's own long strings, would reach the client as a
// header-size error instead of this status. So a message over
// kMaxStatusMessageBytes is cut there, on a UTF-8 character boundary, and
// says how many bytes were left out.
grpc::Status ToGrpcStatus(const absl::Status& status);
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// Canonical upper-case name of a status code ("OK", "INVALID_ARGUMENT", ...);
// the values of the `code` metric label.
const char* StatusCodeName(absl::StatusCode code);
inline constexpr int kStatusCodeCount = 17;  // OK .. UNAUTHENTICATED

}  // namespace normsvc::server
