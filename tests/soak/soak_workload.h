// The requests the soak test sends, built once before the load starts:
// valid forward requests with their expected results (computed in double
// precision by the kernels' row oracle, independently of the server's
// backend), and invalid or oversized requests with the one status code each
// must get. Requests are shared read-only by every call that sends them.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "normsvc/v1/normalizer.pb.h"

namespace normsvc::soak {

// The server limits the soak test starts normsvc with; the oversized
// requests are built just past them.
struct SoakLimits {
  int64_t max_hidden_size = 8192;
  int64_t max_request_rows = 4096;
  int64_t max_request_bytes = 8 << 20;
  int64_t max_receive_message_bytes = 64 << 20;  // normsvc's smallest allowed value
};

// A registered parameter set (the soak test registers these before the load).
struct ParameterSetSpec {
  v1::RegisterParametersRequest request;
  std::vector<double> gamma, beta;  // decoded values (empty: absent)
};

struct ValidRequest {
  v1::NormalizeRequest request;
  int64_t bytes = 0;        // serialized size
  std::string description;  // e.g. "layernorm bf16 [8,4096] residual"
  // Expected values in double precision (not rounded to any dtype).
  std::vector<double> output, residual_sum, mean, rstd;
};

struct InvalidRequest {
  v1::NormalizeRequest request;
  grpc::StatusCode expected;
  std::string description;  // what is wrong with it
};

struct Workload {
  std::vector<ParameterSetSpec> parameter_sets;
  std::vector<ValidRequest> valid;
  std::vector<InvalidRequest> malformed;  // cheap: bad fields, wrong sizes
  std::vector<InvalidRequest> oversized;  // past a limit, checked before allocation
  // Sent rarely (large): real data past --max_request_bytes, and a message
  // past --max_receive_message_bytes (refused by gRPC itself).
  std::vector<InvalidRequest> huge;
};

Workload BuildWorkload(uint64_t seed, const SoakLimits& limits, int valid_count);

// Empty when `response` matches `expected` (request_id, dtypes, shapes,
// values within the output dtype's tolerance); else the first mismatch.
// Streamed copies carry their own request_id.
std::string VerifyForward(const ValidRequest& expected, const v1::NormalizeResponse& response,
                          uint64_t request_id);

// "OK", "INVALID_ARGUMENT", ...
std::string CodeName(int code);

}  // namespace normsvc::soak
