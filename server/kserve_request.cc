#include "server/kserve_request.h"

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/tensor_codec.h"

namespace normsvc::server {
namespace {

using InputTensor = inference::ModelInferRequest::InferInputTensor;

absl::Status InputError(const InputTensor& input, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "': ", what));
}

// Fills `tensor` from input `index` of `request`.
absl::Status ReadInput(inference::ModelInferRequest& request, int index, v1::Tensor* tensor) {
  const InputTensor& input = request.inputs(index);
  const std::optional<kernels::DType> dtype = KserveDatatypeFromName(input.datatype());
  if (!dtype.has_value()) {
    return InputError(input, absl::StrCat("datatype '", input.datatype(),
                                          "' is not supported (FP32, FP16 or BF16)"));
  }
  tensor->set_dtype(ToProtoDType(*dtype));
  for (int64_t dim : input.shape()) tensor->add_shape(dim);
  const auto& typed = input.contents();
  const bool has_typed = typed.fp32_contents_size() > 0 || typed.bool_contents_size() > 0 ||
                         typed.int_contents_size() > 0 || typed.int64_contents_size() > 0 ||
                         typed.uint_contents_size() > 0 || typed.uint64_contents_size() > 0 ||
                         typed.fp64_contents_size() > 0 || typed.bytes_contents_size() > 0;
  if (request.raw_input_contents_size() > 0) {
    if (has_typed) return InputError(input, "has contents although raw_input_contents is used");
    // Swapped into the emptied tensor: the request's entry is left empty.
    tensor->clear_data();
    tensor->mutable_data()->swap(*request.mutable_raw_input_contents(index));
    return absl::OkStatus();
  }
  if (*dtype != kernels::DType::kF32) {
    return InputError(input, absl::StrCat(input.datatype(),
                                          " data must come in raw_input_contents (the protocol "
                                          "has no typed contents for it)"));
  }
  if (typed.fp32_contents_size() == 0 && has_typed) {
    return InputError(input, "FP32 data must be in contents.fp32_contents");
  }
  std::string* data = tensor->mutable_data();
  data->resize(static_cast<size_t>(typed.fp32_contents_size()) * sizeof(float));
  if (!data->empty()) std::memcpy(data->data(), typed.fp32_contents().data(), data->size());
  return absl::OkStatus();
}

absl::Status ReadEpsilon(const inference::ModelInferRequest& request, float* epsilon) {
  const auto it = request.parameters().find("epsilon");
  if (it == request.parameters().end()) return absl::OkStatus();
  const inference::InferParameter& p = it->second;
  double value = 0;
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kDoubleParam:
      value = p.double_param();
      break;
    case inference::InferParameter::kInt64Param:
      value = static_cast<double>(p.int64_param());
      break;
    case inference::InferParameter::kStringParam:
      if (!absl::SimpleAtod(p.string_param(), &value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter 'epsilon': '", p.string_param(), "' is not a number"));
      }
      break;
    default:
      return absl::InvalidArgumentError("parameter 'epsilon' must be a double");
  }
  // Zero would mean "the default" to the normsvc.v1 path; the protocol has
  // no such convention, so it is refused here like any non-positive value.
  const float as_float = static_cast<float>(value);
  if (!(as_float > 0) || !std::isfinite(as_float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'epsilon' must be finite and > 0 in FP32, got ", value));
  }
  *epsilon = as_float;
  return absl::OkStatus();
}

}  // namespace

absl::Status ToNormalizeRequest(const KserveModel& model, inference::ModelInferRequest& in,
                                v1::NormalizeRequest* out) {
  out->set_op(model.op == kernels::NormOp::kLayerNorm ? v1::LAYER_NORM : v1::RMS_NORM);
  if (in.raw_input_contents_size() > 0 && in.raw_input_contents_size() != in.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat("raw_input_contents has ",
                                                   in.raw_input_contents_size(), " entries for ",
                                                   in.inputs_size(), " inputs"));
  }
  bool have_input = false;
  bool have_gamma = false;
  bool have_beta = false;
  v1::Parameters::Inline* inline_parameters = nullptr;
  for (int i = 0; i < in.inputs_size(); ++i) {
    const std::string& name = in.inputs(i).name();
    v1::Tensor* target = nullptr;
    bool* seen = nullptr;
    if (name == kKserveInput) {
      target = out->mutable_input();
      seen = &have_input;
    } else if (name == kKserveGamma || name == kKserveBeta) {
      if (model.parameters != nullptr) {
        return InputError(in.inputs(i),
                          absl::StrCat("model '", model.name, "' takes its parameters from set '",
                                       model.parameters->name, "'"));
      }
      if (name == kKserveBeta && model.op == kernels::NormOp::kRmsNorm) {
        return InputError(in.inputs(i), "rmsnorm has no beta");
      }
      if (inline_parameters == nullptr) {
        inline_parameters = out->mutable_parameters()->mutable_inline_();
      }
      const bool gamma = name == kKserveGamma;
      target = gamma ? inline_parameters->mutable_gamma() : inline_parameters->mutable_beta();
      seen = gamma ? &have_gamma : &have_beta;
    } else {
      return InputError(in.inputs(i), absl::StrCat("unknown input (model '", model.name,
                                                   "' takes INPUT, GAMMA, BETA)"));
    }
    if (*seen) return InputError(in.inputs(i), "given twice");
    *seen = true;
    if (absl::Status status = ReadInput(in, i, target); !status.ok()) return status;
  }
  if (!have_input) return absl::InvalidArgumentError("input 'INPUT' is missing");
  if (model.parameters != nullptr) out->mutable_parameters()->set_name(model.parameters->name);
  for (const auto& output : in.outputs()) {
    if (output.name() != kKserveOutput) {
      return absl::InvalidArgumentError(
          absl::StrCat("requested output '", output.name(), "' does not exist (only OUTPUT)"));
    }
  }
  float epsilon = kDefaultEpsilon;
  if (absl::Status status = ReadEpsilon(in, &epsilon); !status.ok()) return status;
  out->set_epsilon(epsilon);
  return absl::OkStatus();
}

absl::Status ToKserveError(const KserveModel& model, const absl::Status& status) {
  std::string message(status.message());
  if (absl::StartsWith(message, "input.") || absl::StartsWith(message, "input:")) {
    message.replace(0, 5, kKserveInput);
  }
  message = absl::StrReplaceAll(message, {{"parameters.inline.gamma", kKserveGamma},
                                          {"parameters.inline.beta", kKserveBeta}});
  return absl::Status(status.code(), absl::StrCat("model '", model.name, "': ", message));
}

void ToModelInferResponse(const KserveModel& model, const inference::ModelInferRequest& request,
                          v1::NormalizeResponse* result, inference::ModelInferResponse* out) {
  out->set_model_name(model.name);
  out->set_model_version(kKserveModelVersion);
  out->set_id(request.id());
  auto* tensor = out->add_outputs();
  tensor->set_name(kKserveOutput);
  const std::optional<kernels::DType> dtype = FromProtoDType(result->output().dtype());
  tensor->set_datatype(dtype.has_value() ? KserveDatatypeName(*dtype) : "");
  for (int64_t dim : result->output().shape()) tensor->add_shape(dim);
  out->add_raw_output_contents()->swap(*result->mutable_output()->mutable_data());
}

}  // namespace normsvc::server
