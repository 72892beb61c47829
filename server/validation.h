// Edge validation: every request is checked here, before the server
// allocates anything for it. A failure names the offending field:
//   INVALID_ARGUMENT     malformed request, or beyond a configured size limit
//   NOT_FOUND            a referenced parameter set does not exist
//   FAILED_PRECONDITION  a referenced parameter set does not fit the request
// What passes is a plan of views into the request; nothing is copied.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "normsvc/kernels/types.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/parameter_store.h"
#include "server/received_bytes.h"

namespace normsvc::server {

namespace v1 = ::normsvc::v1;

inline constexpr float kDefaultEpsilon = 1e-5f;

struct RequestLimits {
  int64_t max_hidden_size = 262144;
  int64_t max_request_rows = 1048576;
  int64_t max_request_bytes = int64_t{256} << 20;
};

// A validated activation tensor: rows x hidden, row-major, dense.
struct TensorView {
  kernels::DType dtype = kernels::DType::kF32;
  // The first byte. When `received` is set the bytes may continue in other
  // pieces of gRPC's buffers: read them through `received`.
  const void* data = nullptr;
  const ReceivedBytes* received = nullptr;
  int64_t rows = 0;
  int64_t hidden = 0;
  int64_t bytes = 0;
};

// The data of a NormalizeRequest's tensors where a parser kept it beside the
// message, in pieces of gRPC's buffers (received_request.h); the message's
// own data fields are then empty. Each pointer is non-null.
struct ReceivedTensorData {
  const ReceivedBytes* input;
  const ReceivedBytes* residual;
  const ReceivedBytes* gamma;  // parameters.inline.gamma
  const ReceivedBytes* beta;   // parameters.inline.beta
};

// The same for a NormalizeBackwardRequest (received_request.h).
struct ReceivedBackwardData {
  const ReceivedBytes* input;
  const ReceivedBytes* grad_output;
  const ReceivedBytes* mean;
  const ReceivedBytes* rstd;
  const ReceivedBytes* gamma;  // parameters.inline.gamma
};

// The same for a RegisterParametersRequest.
struct ReceivedRegisterData {
  const ReceivedBytes* gamma;
  const ReceivedBytes* beta;
};

// gamma/beta of a request: a registered set or inline views (or neither).
struct ParameterViews {
  std::shared_ptr<const ParameterSet> set;
  kernels::DType dtype = kernels::DType::kF32;
  const void* gamma = nullptr;  // inline only (the first byte, as TensorView::data)
  const void* beta = nullptr;   // inline only
  const ReceivedBytes* gamma_received = nullptr;  // as TensorView::received
  const ReceivedBytes* beta_received = nullptr;
  int64_t inline_bytes = 0;
};

struct ForwardPlan {
  kernels::NormOp op = kernels::NormOp::kLayerNorm;
  float epsilon = kDefaultEpsilon;
  TensorView input;
  const void* residual = nullptr;  // the first byte, as TensorView::data
  const ReceivedBytes* residual_received = nullptr;
  kernels::DType out_dtype = kernels::DType::kF32;
  bool return_residual_sum = false;
  bool return_statistics = false;
  ParameterViews parameters;
};

struct BackwardPlan {
  kernels::NormOp op = kernels::NormOp::kLayerNorm;
  float epsilon = kDefaultEpsilon;
  TensorView input;
  const void* grad_output = nullptr;
  const float* mean = nullptr;  // optional saved statistics
  const float* rstd = nullptr;
  ParameterViews parameters;  // gamma only
};

struct RegisterPlan {
  absl::string_view name;
  int64_t hidden = 0;
  kernels::DType dtype = kernels::DType::kF32;
  absl::string_view gamma;  // empty: absent
  absl::string_view beta;
};

// The bytes of the result tensors' data a forward reply carries (output,
// and residual_sum, mean, rstd when asked for). ValidateNormalize refuses a
// request whose reply would not fit one gRPC message (kMaxReplyDataBytes:
// a message holds at most 2^31 - 1 bytes, less room for the tensors'
// headers).
int64_t ForwardReplyDataBytes(const ForwardPlan& plan);
inline constexpr int64_t kMaxReplyDataBytes = int64_t{0x7fffffff} - (int64_t{1} << 16);

absl::StatusOr<ForwardPlan> ValidateNormalize(const v1::NormalizeRequest& request,
                                              const RequestLimits& limits,
                                              const ParameterStore& store);
// The same for a request whose tensors' data was received beside it; the
// plan's views point into `received`.
absl::StatusOr<ForwardPlan> ValidateNormalize(const v1::NormalizeRequest& request,
                                              const ReceivedTensorData& received,
                                              const RequestLimits& limits,
                                              const ParameterStore& store);
absl::StatusOr<BackwardPlan> ValidateNormalizeBackward(const v1::NormalizeBackwardRequest& request,
                                                       const RequestLimits& limits,
                                                       const ParameterStore& store);
// Checks what ValidateNormalizeBackward checks, in the same order and with
// the same status, on a request whose tensors' data was received beside it
// (only the data's sizes are read): a valid request gets its plan, whose
// sizes are the request's (its views point into `received`: read only the
// sizes), and its data may then be put into the message for
// ValidateNormalizeBackward, whose answer stands (it differs only where a
// named parameter set was replaced or deleted in between).
absl::StatusOr<BackwardPlan> CheckNormalizeBackward(const v1::NormalizeBackwardRequest& request,
                                                    const ReceivedBackwardData& received,
                                                    const RequestLimits& limits,
                                                    const ParameterStore& store);
absl::StatusOr<RegisterPlan> ValidateRegisterParameters(
    const v1::RegisterParametersRequest& request, const RequestLimits& limits);
// Checks what ValidateRegisterParameters checks, as CheckNormalizeBackward
// does for ValidateNormalizeBackward.
absl::Status CheckRegisterParameters(const v1::RegisterParametersRequest& request,
                                     const ReceivedRegisterData& received,
                                     const RequestLimits& limits);
// `field` names the field in messages ("name").
absl::Status ValidateParameterSetName(absl::string_view name, absl::string_view field);

}  // namespace normsvc::server
