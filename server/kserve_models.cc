#include "server/kserve_models.h"

#include "absl/strings/str_cat.h"
#include "inference/model_config.pb.h"

namespace normsvc::server {
namespace {

constexpr char kLayerNorm[] = "layernorm";
constexpr char kRmsNorm[] = "rmsnorm";
constexpr char kPlatform[] = "normsvc";

const char* OpModelName(kernels::NormOp op) {
  return op == kernels::NormOp::kLayerNorm ? kLayerNorm : kRmsNorm;
}

inference::DataType ConfigDataType(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kF32:
      return inference::TYPE_FP32;
    case kernels::DType::kF16:
      return inference::TYPE_FP16;
    case kernels::DType::kBF16:
      return inference::TYPE_BF16;
  }
  return inference::TYPE_INVALID;
}

// The activations take any of the three dtypes; metadata can name one only,
// so the plain models advertise FP32 (the others are accepted as well).
struct TensorSpec {
  const char* name;
  std::vector<int64_t> shape;
  kernels::DType dtype;
  bool optional;
};

std::vector<TensorSpec> Inputs(const KserveModel& model) {
  const int64_t hidden = model.parameters != nullptr ? model.parameters->hidden : -1;
  std::vector<TensorSpec> inputs = {{kKserveInput, {-1, hidden}, kernels::DType::kF32, false}};
  if (model.parameters == nullptr) {
    inputs.push_back({kKserveGamma, {-1}, kernels::DType::kF32, true});
    if (model.op == kernels::NormOp::kLayerNorm)
      inputs.push_back({kKserveBeta, {-1}, kernels::DType::kF32, true});
  }
  return inputs;
}

TensorSpec Output(const KserveModel& model) {
  const int64_t hidden = model.parameters != nullptr ? model.parameters->hidden : -1;
  return {kKserveOutput, {-1, hidden}, kernels::DType::kF32, false};
}

}  // namespace

absl::StatusOr<KserveModel> ResolveKserveModel(absl::string_view name, absl::string_view version,
                                               const ParameterStore& store) {
  if (!version.empty() && version != kKserveModelVersion) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version '", version,
                                            "' (only \"", kKserveModelVersion, "\")"));
  }
  KserveModel model;
  model.name = std::string(name);
  const size_t dot = name.find('.');
  const absl::string_view op_name = name.substr(0, dot);
  if (op_name == kLayerNorm) {
    model.op = kernels::NormOp::kLayerNorm;
  } else if (op_name == kRmsNorm) {
    model.op = kernels::NormOp::kRmsNorm;
  } else {
    return absl::NotFoundError(absl::StrCat("unknown model '", name,
                                            "': models are layernorm, rmsnorm, layernorm.<set> "
                                            "and rmsnorm.<set> for a registered parameter set"));
  }
  if (dot == absl::string_view::npos) return model;
  const absl::string_view set_name = name.substr(dot + 1);
  model.parameters = store.Find(set_name);
  if (model.parameters == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown model '", name, "': no parameter set '", set_name, "'"));
  }
  if (model.op == kernels::NormOp::kRmsNorm && model.parameters->has_beta) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", name, "': parameter set '", set_name, "' has beta, which RMSNorm refuses"));
  }
  return model;
}

std::vector<KserveModel> ListKserveModels(const ParameterStore& store) {
  std::vector<KserveModel> models;
  const auto sets = store.List();
  for (kernels::NormOp op : {kernels::NormOp::kLayerNorm, kernels::NormOp::kRmsNorm}) {
    models.push_back({OpModelName(op), op, nullptr});
    for (const auto& set : sets) {
      if (op == kernels::NormOp::kRmsNorm && set->has_beta) continue;
      models.push_back({absl::StrCat(OpModelName(op), ".", set->name), op, set});
    }
  }
  return models;
}

const char* KserveDatatypeName(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kF32:
      return "FP32";
    case kernels::DType::kF16:
      return "FP16";
    case kernels::DType::kBF16:
      return "BF16";
  }
  return "";
}

std::optional<kernels::DType> KserveDatatypeFromName(absl::string_view name) {
  if (name == "FP32") return kernels::DType::kF32;
  if (name == "FP16") return kernels::DType::kF16;
  if (name == "BF16") return kernels::DType::kBF16;
  return std::nullopt;
}

void DescribeKserveModel(const KserveModel& model, inference::ModelMetadataResponse* metadata) {
  metadata->set_name(model.name);
  const std::string version(kKserveModelVersion);
  *metadata->add_versions() = version;
  metadata->set_platform(kPlatform);
  for (const TensorSpec& spec : Inputs(model)) {
    auto* tensor = metadata->add_inputs();
    tensor->set_name(spec.name);
    tensor->set_datatype(KserveDatatypeName(spec.dtype));
    for (int64_t dim : spec.shape) tensor->add_shape(dim);
  }
  const TensorSpec out = Output(model);
  auto* tensor = metadata->add_outputs();
  tensor->set_name(out.name);
  tensor->set_datatype(KserveDatatypeName(out.dtype));
  for (int64_t dim : out.shape) tensor->add_shape(dim);
}

void ConfigureKserveModel(const KserveModel& model, inference::ModelConfig* config) {
  config->set_name(model.name);
  config->set_platform(kPlatform);
  config->set_backend(kPlatform);
  // 0: the batch dimension is part of INPUT's shape ([-1, H]); the server
  // batches requests itself, across clients, into multi-request launches.
  config->set_max_batch_size(0);
  for (const TensorSpec& spec : Inputs(model)) {
    auto* input = config->add_input();
    input->set_name(spec.name);
    input->set_data_type(ConfigDataType(spec.dtype));
    for (int64_t dim : spec.shape) input->add_dims(dim);
    input->set_optional(spec.optional);
  }
  const TensorSpec out = Output(model);
  auto* output = config->add_output();
  output->set_name(out.name);
  output->set_data_type(ConfigDataType(out.dtype));
  for (int64_t dim : out.shape) output->add_dims(dim);
  (*config->mutable_parameters())["op"].set_string_value(OpModelName(model.op));
  if (model.parameters != nullptr) {
    (*config->mutable_parameters())["parameter_set"].set_string_value(model.parameters->name);
  }
}

}  // namespace normsvc::server
