#include "server/validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/tensor_codec.h"

namespace normsvc::server {
namespace {

using Shape = google::protobuf::RepeatedField<int64_t>;

std::string ShapeString(const Shape& shape, int rank) {
  return absl::StrCat("[", absl::StrJoin(shape.begin(), shape.begin() + rank, ", "), "]");
}

const std::string& ProtoDTypeName(kernels::DType dtype) {
  return v1::DType_Name(ToProtoDType(dtype));
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::StatusOr<kernels::DType> CheckDType(const v1::Tensor& tensor, absl::string_view field) {
  std::optional<kernels::DType> dtype = FromProtoDType(tensor.dtype());
  if (!dtype) {
    return Invalid(absl::StrCat(field, ".dtype"), absl::StrCat("must be FP32, FP16 or BF16, got ",
                                                               static_cast<int>(tensor.dtype())));
  }
  return *dtype;
}

// A tensor's data: in the message, or received beside it (`received`).
struct Data {
  const void* first = nullptr;  // the first byte
  int64_t size = 0;
  const ReceivedBytes* received = nullptr;
};

Data DataOf(const v1::Tensor& tensor, const ReceivedBytes* received) {
  if (received != nullptr) {
    // A present tensor has a non-null address even with no bytes, as a
    // protobuf string's data() has: views mark presence by it.
    static constexpr char kNoBytes = 0;
    const char* first = received->size() > 0 ? received->first() : &kNoBytes;
    return {first, received->size(), received};
  }
  return {TensorData(tensor), static_cast<int64_t>(tensor.data().size()), nullptr};
}

absl::Status CheckDataLength(const Data& data, absl::string_view field, int64_t expected,
                             const Shape& shape, int rank, kernels::DType dtype) {
  if (data.size != expected) {
    return Invalid(absl::StrCat(field, ".data"),
                   absl::StrCat(data.size, " bytes, but shape ", ShapeString(shape, rank), " of ",
                                ProtoDTypeName(dtype), " needs ", expected));
  }
  return absl::OkStatus();
}

// An activation tensor: at least one dimension, the last is H.
absl::StatusOr<TensorView> CheckActivation(const v1::Tensor& tensor, absl::string_view field,
                                           const RequestLimits& limits,
                                           const ReceivedBytes* received = nullptr) {
  absl::StatusOr<kernels::DType> dtype = CheckDType(tensor, field);
  if (!dtype.ok()) return dtype.status();
  const Shape& shape = tensor.shape();
  const std::string shape_field = absl::StrCat(field, ".shape");
  if (shape.empty())
    return Invalid(shape_field, "must have at least one dimension (the hidden size)");
  for (int i = 0; i < shape.size(); ++i) {
    if (shape.Get(i) < 0) {
      return Invalid(absl::StrCat(shape_field, "[", i, "]"),
                     absl::StrCat("must be >= 0, got ", shape.Get(i)));
    }
  }
  const int64_t hidden = shape.Get(shape.size() - 1);
  if (hidden < 1) return Invalid(shape_field, "the last dimension (hidden size) must be >= 1");
  if (hidden > limits.max_hidden_size) {
    return Invalid(shape_field, absl::StrCat("hidden size ", hidden, " exceeds the limit of ",
                                             limits.max_hidden_size, " (--max_hidden_size)"));
  }
  // Multiply the leading dimensions with the limit as a guard: no overflow.
  int64_t rows = 1;
  for (int i = 0; i + 1 < shape.size(); ++i) {
    const int64_t dim = shape.Get(i);
    if (dim == 0) {
      rows = 0;
      break;
    }
    if (dim > limits.max_request_rows || rows > limits.max_request_rows / dim) {
      rows = limits.max_request_rows + 1;
      for (int j = i + 1; j + 1 < shape.size(); ++j) {
        if (shape.Get(j) == 0) rows = 0;
      }
      break;
    }
    rows *= dim;
  }
  if (rows > limits.max_request_rows) {
    return Invalid(shape_field, absl::StrCat("more rows than the limit of ",
                                             limits.max_request_rows, " (--max_request_rows)"));
  }
  const int64_t bytes = rows * hidden * static_cast<int64_t>(kernels::DTypeSize(*dtype));
  if (bytes > limits.max_request_bytes) {
    return Invalid(shape_field, absl::StrCat(bytes, " bytes exceed the limit of ",
                                             limits.max_request_bytes, " (--max_request_bytes)"));
  }
  const Data data = DataOf(tensor, received);
  if (absl::Status st = CheckDataLength(data, field, bytes, shape, shape.size(), *dtype);
      !st.ok()) {
    return st;
  }
  return TensorView{*dtype, data.first, data.received, rows, hidden, bytes};
}

// A tensor that must match the input exactly (residual, grad_output).
absl::Status CheckLikeInput(const v1::Tensor& tensor, absl::string_view field,
                            const v1::Tensor& input, const TensorView& view,
                            const ReceivedBytes* received = nullptr) {
  if (tensor.dtype() != input.dtype()) {
    return Invalid(absl::StrCat(field, ".dtype"),
                   absl::StrCat("must equal input.dtype (", ProtoDTypeName(view.dtype), ")"));
  }
  if (tensor.shape().size() != input.shape().size() ||
      !std::equal(tensor.shape().begin(), tensor.shape().end(), input.shape().begin())) {
    return Invalid(
        absl::StrCat(field, ".shape"),
        absl::StrCat("must equal input.shape ", ShapeString(input.shape(), input.shape().size())));
  }
  return CheckDataLength(DataOf(tensor, received), field, view.bytes, tensor.shape(),
                         tensor.shape().size(), view.dtype);
}

// Saved statistics for backward: FP32, shape = input.shape without its last dimension.
absl::StatusOr<const float*> CheckStatistic(const v1::Tensor& tensor, absl::string_view field,
                                            const v1::Tensor& input, const TensorView& view,
                                            const ReceivedBytes* received = nullptr) {
  if (tensor.dtype() != v1::FP32) return Invalid(absl::StrCat(field, ".dtype"), "must be FP32");
  const int rank = input.shape().size() - 1;
  if (tensor.shape().size() != rank ||
      !std::equal(tensor.shape().begin(), tensor.shape().end(), input.shape().begin())) {
    return Invalid(absl::StrCat(field, ".shape"),
                   absl::StrCat("must be input.shape without its last dimension, ",
                                ShapeString(input.shape(), rank)));
  }
  const Data data = DataOf(tensor, received);
  if (absl::Status st =
          CheckDataLength(data, field, view.rows * 4, tensor.shape(), rank, kernels::DType::kF32);
      !st.ok()) {
    return st;
  }
  return static_cast<const float*>(data.first);
}

absl::StatusOr<float> CheckEpsilon(float epsilon) {
  if (epsilon == 0.0f) return kDefaultEpsilon;
  if (!std::isfinite(epsilon) || epsilon < 0.0f) {
    return Invalid("epsilon", absl::StrCat("must be finite and > 0, got ", epsilon));
  }
  return epsilon;
}

absl::StatusOr<kernels::NormOp> CheckOp(v1::NormOp proto_op) {
  std::optional<kernels::NormOp> op = FromProtoOp(proto_op);
  if (!op)
    return Invalid(
        "op", absl::StrCat("must be LAYER_NORM or RMS_NORM, got ", static_cast<int>(proto_op)));
  return *op;
}

// An inline parameter: FP32 or the activation dtype, shape [H].
absl::Status CheckInlineParameter(const v1::Tensor& tensor, absl::string_view field,
                                  const TensorView& input, std::optional<kernels::DType> required,
                                  const ReceivedBytes* received) {
  absl::StatusOr<kernels::DType> dtype = CheckDType(tensor, field);
  if (!dtype.ok()) return dtype.status();
  if (required && *dtype != *required) {
    return Invalid(absl::StrCat(field, ".dtype"), "must equal parameters.inline.gamma.dtype");
  }
  if (*dtype != kernels::DType::kF32 && *dtype != input.dtype) {
    return Invalid(absl::StrCat(field, ".dtype"), absl::StrCat("must be FP32 or the input dtype (",
                                                               ProtoDTypeName(input.dtype), ")"));
  }
  if (tensor.shape().size() != 1 || tensor.shape().Get(0) != input.hidden) {
    return Invalid(absl::StrCat(field, ".shape"), absl::StrCat("must be [", input.hidden, "]"));
  }
  return CheckDataLength(DataOf(tensor, received), field,
                         input.hidden * static_cast<int64_t>(kernels::DTypeSize(*dtype)),
                         tensor.shape(), 1, *dtype);
}

// `gamma_received`, `beta_received`: where the inline tensors' data was
// received beside the message, else null.
absl::StatusOr<ParameterViews> CheckParameters(const v1::Parameters& parameters, kernels::NormOp op,
                                               const TensorView& input, bool uses_beta,
                                               const ParameterStore& store,
                                               const ReceivedBytes* gamma_received = nullptr,
                                               const ReceivedBytes* beta_received = nullptr) {
  ParameterViews views;
  views.dtype = input.dtype;
  if (parameters.source_case() == v1::Parameters::kName) {
    const std::string& name = parameters.name();
    std::shared_ptr<const ParameterSet> set = store.Find(name);
    if (set == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("parameters.name: no parameter set named '", name, "'"));
    }
    if (set->hidden != input.hidden) {
      return absl::FailedPreconditionError(absl::StrCat("parameters.name: set '", name,
                                                        "' has hidden size ", set->hidden,
                                                        ", but the input has ", input.hidden));
    }
    if (set->dtype != kernels::DType::kF32 && set->dtype != input.dtype) {
      return absl::FailedPreconditionError(
          absl::StrCat("parameters.name: set '", name, "' is ", ProtoDTypeName(set->dtype),
                       "; it must be FP32 or the input dtype (", ProtoDTypeName(input.dtype), ")"));
    }
    if (uses_beta && op == kernels::NormOp::kRmsNorm && set->has_beta) {
      return absl::FailedPreconditionError(
          absl::StrCat("parameters.name: set '", name, "' has beta, which RMS_NORM does not take"));
    }
    views.dtype = set->dtype;
    views.set = std::move(set);
    return views;
  }
  if (parameters.source_case() != v1::Parameters::kInline) return views;
  const v1::Parameters::Inline& params = parameters.inline_();
  std::optional<kernels::DType> gamma_dtype;
  if (params.has_gamma()) {
    if (absl::Status st = CheckInlineParameter(params.gamma(), "parameters.inline.gamma", input,
                                               std::nullopt, gamma_received);
        !st.ok()) {
      return st;
    }
    gamma_dtype = *FromProtoDType(params.gamma().dtype());
    views.dtype = *gamma_dtype;
    const Data data = DataOf(params.gamma(), gamma_received);
    views.gamma = data.first;
    views.gamma_received = data.received;
    views.inline_bytes += data.size;
  }
  if (params.has_beta() && uses_beta) {
    if (op == kernels::NormOp::kRmsNorm) {
      return Invalid("parameters.inline.beta", "RMS_NORM takes no beta");
    }
    if (absl::Status st = CheckInlineParameter(params.beta(), "parameters.inline.beta", input,
                                               gamma_dtype, beta_received);
        !st.ok()) {
      return st;
    }
    views.dtype = *FromProtoDType(params.beta().dtype());
    const Data data = DataOf(params.beta(), beta_received);
    views.beta = data.first;
    views.beta_received = data.received;
    views.inline_bytes += data.size;
  }
  return views;
}

}  // namespace

absl::Status ValidateParameterSetName(absl::string_view name, absl::string_view field) {
  bool ok = !name.empty() && name.size() <= 128;
  for (char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    ok = ok && allowed;
  }
  if (!ok) return Invalid(field, "must match [A-Za-z0-9._-]{1,128}");
  return absl::OkStatus();
}

namespace {

// `received`: where the tensors' data was received beside the message, else null.
absl::StatusOr<ForwardPlan> ValidateForward(const v1::NormalizeRequest& request,
                                            const ReceivedTensorData* received,
                                            const RequestLimits& limits,
                                            const ParameterStore& store) {
  auto received_of = [received](const ReceivedBytes* ReceivedTensorData::*which) {
    return received != nullptr ? received->*which : nullptr;
  };
  ForwardPlan plan;
  absl::StatusOr<kernels::NormOp> op = CheckOp(request.op());
  if (!op.ok()) return op.status();
  plan.op = *op;
  if (!request.has_input()) return Invalid("input", "required");
  absl::StatusOr<TensorView> input =
      CheckActivation(request.input(), "input", limits, received_of(&ReceivedTensorData::input));
  if (!input.ok()) return input.status();
  plan.input = *input;
  absl::StatusOr<float> epsilon = CheckEpsilon(request.epsilon());
  if (!epsilon.ok()) return epsilon.status();
  plan.epsilon = *epsilon;
  if (request.output_dtype() == v1::DTYPE_UNSPECIFIED) {
    plan.out_dtype = plan.input.dtype;
  } else if (std::optional<kernels::DType> out = FromProtoDType(request.output_dtype())) {
    plan.out_dtype = *out;
  } else {
    return Invalid("output_dtype", absl::StrCat("must be FP32, FP16, BF16 or unset, got ",
                                                static_cast<int>(request.output_dtype())));
  }
  if (request.has_residual()) {
    const ReceivedBytes* residual_received = received_of(&ReceivedTensorData::residual);
    if (absl::Status st = CheckLikeInput(request.residual(), "residual", request.input(),
                                         plan.input, residual_received);
        !st.ok()) {
      return st;
    }
    const Data data = DataOf(request.residual(), residual_received);
    plan.residual = data.first;
    plan.residual_received = data.received;
  }
  if (request.return_residual_sum() && plan.residual == nullptr) {
    return Invalid("return_residual_sum", "requires residual");
  }
  plan.return_residual_sum = request.return_residual_sum();
  plan.return_statistics = request.return_statistics();
  absl::StatusOr<ParameterViews> params = CheckParameters(
      request.parameters(), plan.op, plan.input, /*uses_beta=*/true, store,
      received_of(&ReceivedTensorData::gamma), received_of(&ReceivedTensorData::beta));
  if (!params.ok()) return params.status();
  plan.parameters = *std::move(params);
  if (const int64_t reply = ForwardReplyDataBytes(plan); reply > kMaxReplyDataBytes) {
    return Invalid("input", absl::StrCat("the reply would carry ", reply,
                                         " bytes of tensors, more than one gRPC message holds (",
                                         kMaxReplyDataBytes, ")"));
  }
  return plan;
}

}  // namespace

absl::StatusOr<ForwardPlan> ValidateNormalize(const v1::NormalizeRequest& request,
                                              const RequestLimits& limits,
                                              const ParameterStore& store) {
  return ValidateForward(request, nullptr, limits, store);
}

absl::StatusOr<ForwardPlan> ValidateNormalize(const v1::NormalizeRequest& request,
                                              const ReceivedTensorData& received,
                                              const RequestLimits& limits,
                                              const ParameterStore& store) {
  return ValidateForward(request, &received, limits, store);
}

int64_t ForwardReplyDataBytes(const ForwardPlan& plan) {
  const int64_t elements = plan.input.rows * plan.input.hidden;
  int64_t bytes = elements * static_cast<int64_t>(kernels::DTypeSize(plan.out_dtype));
  if (plan.return_residual_sum) bytes += plan.input.bytes;
  if (plan.return_statistics) {
    bytes += plan.input.rows * static_cast<int64_t>(sizeof(float)) *
             (plan.op == kernels::NormOp::kLayerNorm ? 2 : 1);
  }
  return bytes;
}

namespace {

// `received`: where the tensors' data was received beside the message, else
// null (and then the plan's pointers are the data's only where it is null).
absl::StatusOr<BackwardPlan> ValidateBackward(const v1::NormalizeBackwardRequest& request,
                                              const ReceivedBackwardData* received,
                                              const RequestLimits& limits,
                                              const ParameterStore& store) {
  auto received_of = [received](const ReceivedBytes* ReceivedBackwardData::*which) {
    return received != nullptr ? received->*which : nullptr;
  };
  BackwardPlan plan;
  absl::StatusOr<kernels::NormOp> op = CheckOp(request.op());
  if (!op.ok()) return op.status();
  plan.op = *op;
  if (!request.has_input()) return Invalid("input", "required");
  absl::StatusOr<TensorView> input =
      CheckActivation(request.input(), "input", limits, received_of(&ReceivedBackwardData::input));
  if (!input.ok()) return input.status();
  plan.input = *input;
  if (!request.has_grad_output()) return Invalid("grad_output", "required");
  const ReceivedBytes* grad_output_received = received_of(&ReceivedBackwardData::grad_output);
  if (absl::Status st = CheckLikeInput(request.grad_output(), "grad_output", request.input(),
                                       plan.input, grad_output_received);
      !st.ok()) {
    return st;
  }
  plan.grad_output = DataOf(request.grad_output(), grad_output_received).first;
  absl::StatusOr<float> epsilon = CheckEpsilon(request.epsilon());
  if (!epsilon.ok()) return epsilon.status();
  plan.epsilon = *epsilon;
  if (plan.op == kernels::NormOp::kRmsNorm) {
    if (request.has_mean()) return Invalid("mean", "RMS_NORM takes no saved mean");
  } else if (request.has_mean() != request.has_rstd()) {
    return Invalid(request.has_mean() ? "rstd" : "mean",
                   "LAYER_NORM takes both saved statistics (mean and rstd) or neither");
  }
  if (request.has_mean()) {
    absl::StatusOr<const float*> mean =
        CheckStatistic(request.mean(), "mean", request.input(), plan.input,
                       received_of(&ReceivedBackwardData::mean));
    if (!mean.ok()) return mean.status();
    plan.mean = *mean;
  }
  if (request.has_rstd()) {
    absl::StatusOr<const float*> rstd =
        CheckStatistic(request.rstd(), "rstd", request.input(), plan.input,
                       received_of(&ReceivedBackwardData::rstd));
    if (!rstd.ok()) return rstd.status();
    plan.rstd = *rstd;
  }
  absl::StatusOr<ParameterViews> params =
      CheckParameters(request.parameters(), plan.op, plan.input, /*uses_beta=*/false, store,
                      received_of(&ReceivedBackwardData::gamma));
  if (!params.ok()) return params.status();
  plan.parameters = *std::move(params);
  return plan;
}

}  // namespace

absl::StatusOr<BackwardPlan> ValidateNormalizeBackward(const v1::NormalizeBackwardRequest& request,
                                                       const RequestLimits& limits,
                                                       const ParameterStore& store) {
  return ValidateBackward(request, nullptr, limits, store);
}

absl::StatusOr<BackwardPlan> CheckNormalizeBackward(const v1::NormalizeBackwardRequest& request,
                                                    const ReceivedBackwardData& received,
                                                    const RequestLimits& limits,
                                                    const ParameterStore& store) {
  return ValidateBackward(request, &received, limits, store);
}

namespace {

// `received`: as for ValidateBackward.
absl::StatusOr<RegisterPlan> ValidateRegister(const v1::RegisterParametersRequest& request,
                                              const ReceivedRegisterData* received,
                                              const RequestLimits& limits) {
  RegisterPlan plan;
  if (absl::Status st = ValidateParameterSetName(request.name(), "name"); !st.ok()) return st;
  plan.name = request.name();
  if (!request.has_gamma() && !request.has_beta()) {
    return Invalid("gamma, beta", "a parameter set needs at least one of them");
  }
  const v1::Tensor* first = nullptr;
  for (const auto& [tensor, field, present, tensor_received] :
       {std::tuple{&request.gamma(), "gamma", request.has_gamma(),
                   received != nullptr ? received->gamma : nullptr},
        std::tuple{&request.beta(), "beta", request.has_beta(),
                   received != nullptr ? received->beta : nullptr}}) {
    if (!present) continue;
    absl::StatusOr<kernels::DType> dtype = CheckDType(*tensor, field);
    if (!dtype.ok()) return dtype.status();
    const std::string shape_field = absl::StrCat(field, ".shape");
    if (tensor->shape().size() != 1) return Invalid(shape_field, "must have one dimension, [H]");
    const int64_t hidden = tensor->shape().Get(0);
    if (hidden < 1) return Invalid(shape_field, "H must be >= 1");
    if (hidden > limits.max_hidden_size) {
      return Invalid(shape_field, absl::StrCat("hidden size ", hidden, " exceeds the limit of ",
                                               limits.max_hidden_size, " (--max_hidden_size)"));
    }
    if (first != nullptr) {
      if (tensor->dtype() != first->dtype()) {
        return Invalid(absl::StrCat(field, ".dtype"), "must equal gamma.dtype");
      }
      if (hidden != plan.hidden) return Invalid(shape_field, "must equal gamma.shape");
    }
    if (absl::Status st = CheckDataLength(DataOf(*tensor, tensor_received), field,
                                          hidden * static_cast<int64_t>(kernels::DTypeSize(*dtype)),
                                          tensor->shape(), 1, *dtype);
        !st.ok()) {
      return st;
    }
    plan.hidden = hidden;
    plan.dtype = *dtype;
    if (tensor == &request.beta()) plan.beta = tensor->data();
    if (tensor == &request.gamma()) plan.gamma = tensor->data();
    if (first == nullptr) first = tensor;
  }
  return plan;
}

}  // namespace

absl::StatusOr<RegisterPlan> ValidateRegisterParameters(
    const v1::RegisterParametersRequest& request, const RequestLimits& limits) {
  return ValidateRegister(request, nullptr, limits);
}

absl::Status CheckRegisterParameters(const v1::RegisterParametersRequest& request,
                                     const ReceivedRegisterData& received,
                                     const RequestLimits& limits) {
  return ValidateRegister(request, &received, limits).status();
}

}  // namespace normsvc::server
