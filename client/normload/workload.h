// What normload sends: a weighted mix of request kinds, each with a few
// pre-built request messages (fresh random data) and, for verification,
// the CPU reference's answer to each.
//
// Mix syntax (--mix, or one kind per line in a --scenario file, '#' starts
// a comment; kinds separated by ';' on the command line):
//   method=forward|backward   op=layernorm|rmsnorm   dtype=fp32|fp16|bf16
//   rows=R  hidden=H  params=none|inline|registered  param_dtype=fp32|same
//   residual=0|1  stats=0|1  out_dtype=fp32|fp16|bf16  eps=E
//   transport=unary|stream   weight=W
// e.g. "op=layernorm,dtype=bf16,rows=16,hidden=4096,params=registered,weight=3"
// Defaults: forward layernorm fp32, rows=1, hidden=4096, params=inline,
// param_dtype=same, no residual, no stats, output in the input dtype, eps 1e-5,
// unary, weight 1.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "normsvc/v1/normalizer.pb.h"

namespace normsvc::normload {

enum class Method { kForward, kBackward };
enum class ParamsMode { kNone, kInline, kRegistered };
enum class Transport { kUnary, kStream };

struct RequestKind {
  Method method = Method::kForward;
  v1::NormOp op = v1::LAYER_NORM;
  v1::DType dtype = v1::FP32;
  v1::DType param_dtype = v1::DTYPE_UNSPECIFIED;  // unspecified: same as dtype
  v1::DType out_dtype = v1::DTYPE_UNSPECIFIED;    // unspecified: same as dtype
  int64_t rows = 1;
  int64_t hidden = 4096;
  ParamsMode params = ParamsMode::kInline;
  bool residual = false;
  bool statistics = false;
  float epsilon = 1e-5f;
  Transport transport = Transport::kUnary;
  double weight = 1.0;
};

// One kind as text in the mix syntax (every field, so reports are explicit).
std::string DescribeKind(const RequestKind& kind);
absl::StatusOr<RequestKind> ParseKind(const std::string& text);
// A ';'-separated list of kinds.
absl::StatusOr<std::vector<RequestKind>> ParseMix(const std::string& text);
absl::StatusOr<std::vector<RequestKind>> ReadScenarioFile(const std::string& path);

// The answer a response must match, per output tensor, as floats decoded
// from the reference's rounded outputs; or, for the echo server, the
// request's input bytes.
struct Expected {
  std::vector<float> output;        // forward y, or backward dx
  std::vector<float> residual_sum;  // forward, with residual
  std::vector<float> mean;          // forward stats (LayerNorm)
  std::vector<float> rstd;          // forward stats
  std::vector<float> grad_gamma;    // backward
  std::vector<float> grad_beta;     // backward, LayerNorm
  // Per column, the sums over rows of the terms' magnitudes: |dy * xhat|
  // for grad_gamma, |dy| for grad_beta (their rounding error scales so).
  std::vector<double> grad_gamma_scale;
  std::vector<double> grad_beta_scale;
};

struct Variant {
  v1::NormalizeRequest forward;           // method forward
  v1::NormalizeBackwardRequest backward;  // method backward
  int64_t request_bytes = 0;              // tensor payload bytes sent
  Expected expected;                      // filled when verifying
};

struct PreparedKind {
  RequestKind kind;
  std::string registered_name;  // params=registered
  v1::RegisterParametersRequest registration;
  std::vector<Variant> variants;
};

struct WorkloadOptions {
  int variants = 4;     // distinct random payloads per kind
  bool verify = false;  // compute expected answers with the CPU reference
  bool echo = false;    // the target echoes inputs; expected = input
  uint64_t seed = 1;
  std::string name_prefix = "normload";  // of registered parameter sets
};

// Builds every kind's variants. Fails on kinds the server could not accept
// in principle (e.g. backward with echo).
absl::StatusOr<std::vector<PreparedKind>> PrepareWorkload(const std::vector<RequestKind>& kinds,
                                                          const WorkloadOptions& options);

}  // namespace normsvc::normload
