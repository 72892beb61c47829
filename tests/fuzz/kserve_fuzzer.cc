// libFuzzer target: untrusted bytes -> an inference::ModelInferRequest (the
// open inference protocol, KServe v2) -> what KserveInference::RunInference
// does before it hands a task to the batcher: ResolveKserveModel,
// ToNormalizeRequest, ValidateNormalize (errors through ToKserveError) and
// BuildForwardTask; then ToModelInferResponse on the sized output, as a
// request of zero rows is answered at once.
//
// A target of its own rather than a fourth kind in fuzz_requests: the
// message, its model resolution and its protocol mapping have nothing in
// common with the normsvc.v1 messages at the byte level, so a shared corpus
// would spend most mutations turning one message into another; its own
// corpus and 30 s ctest also show how much of this path is covered.
//
// Input: the first byte picks the limits (even: small ones, odd: the
// server's defaults), the rest is the message's wire encoding. Besides
// crashes and sanitizer reports, the target checks the contract: a resolved
// model is the one named; a translated request carries INPUT/GAMMA/BETA
// unchanged; what passes validation is a plan whose views lie inside the
// translated request, whose sizes agree with INPUT's shape and datatype, and
// whose response has OUTPUT of INPUT's shape; every error has a message and
// the code its stage documents.
//
// Seed corpus: NORMSVC_FUZZ_WRITE_SEEDS=<dir> ./fuzz_kserve writes valid
// requests for every model kind into <dir> and exits.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz_contract.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve_models.h"
#include "server/kserve_request.h"
#include "server/parameter_store.h"
#include "server/task_builder.h"
#include "server/tensor_codec.h"
#include "server/validation.h"
#include "server_fixture.h"

namespace {

namespace v1 = ::normsvc::v1;
namespace kernels = ::normsvc::kernels;
using inference::ModelInferRequest;
using normsvc::fuzz::Report;
using normsvc::fuzz::Require;
using normsvc::fuzz::WriteSeed;
using normsvc::server::ForwardPlan;
using normsvc::server::KserveModel;
using normsvc::server::ParameterStore;
using normsvc::server::RequestLimits;
using Fixture = normsvc::fuzz::ServerFixture;

// A view must lie inside the bytes of `tensor`, the translated request's.
void RequireInside(const void* view, int64_t bytes, const v1::Tensor& tensor, const char* what) {
  const char* begin = tensor.data().data();
  const char* p = static_cast<const char*>(view);
  Require(bytes == static_cast<int64_t>(tensor.data().size()), what);
  Require(bytes == 0 || p == begin, what);
}

int64_t Size(kernels::DType dtype) { return static_cast<int64_t>(kernels::DTypeSize(dtype)); }

void CheckModel(const KserveModel& model, const ModelInferRequest& request,
                const ParameterStore& store) {
  Require(model.name == request.model_name(), "resolved model name");
  const std::string& name = request.model_name();
  const size_t dot = name.find('.');
  const std::string op_name = name.substr(0, dot);
  Require(op_name == (model.op == kernels::NormOp::kLayerNorm ? "layernorm" : "rmsnorm"),
          "resolved op");
  Require((dot == std::string::npos) == (model.parameters == nullptr), "resolved set");
  if (model.parameters == nullptr) return;
  Require(store.Find(name.substr(dot + 1)) == model.parameters, "resolved set name");
  Require(model.op == kernels::NormOp::kLayerNorm || !model.parameters->has_beta,
          "rmsnorm over a set with beta");
}

// The bytes INPUT/GAMMA/BETA (input `index`) carry in `request`.
std::string InputBytes(const ModelInferRequest& request, int index) {
  if (request.raw_input_contents_size() > 0) return request.raw_input_contents(index);
  const auto& floats = request.inputs(index).contents().fp32_contents();
  return std::string(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float));
}

// The translated tensor is the KServe input, unchanged.
void CheckTranslated(const v1::Tensor& tensor, const ModelInferRequest& request, int index) {
  const auto& input = request.inputs(index);
  const auto dtype = normsvc::server::KserveDatatypeFromName(input.datatype());
  Require(dtype.has_value(), "a translated input of an unsupported datatype");
  Require(tensor.dtype() == normsvc::server::ToProtoDType(*dtype), "translated dtype");
  Require(std::equal(tensor.shape().begin(), tensor.shape().end(), input.shape().begin(),
                     input.shape().end()),
          "translated shape");
  Require(tensor.data() == InputBytes(request, index), "translated data");
}

void CheckTranslation(const KserveModel& model, const ModelInferRequest& request,
                      const v1::NormalizeRequest& out) {
  Require(out.op() == (model.op == kernels::NormOp::kLayerNorm ? v1::LAYER_NORM : v1::RMS_NORM),
          "translated op");
  int inputs = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    if (name == "INPUT") {
      CheckTranslated(out.input(), request, i);
    } else {
      Require(model.parameters == nullptr, "inline parameters for a model over a set");
      Require(name == "GAMMA" || (name == "BETA" && model.op == kernels::NormOp::kLayerNorm),
              "an input the model does not take");
      const auto& inline_params = out.parameters().inline_();
      CheckTranslated(name == "GAMMA" ? inline_params.gamma() : inline_params.beta(), request, i);
    }
    ++inputs;
  }
  Require(inputs >= 1 && out.has_input(), "no INPUT");
  if (model.parameters != nullptr) {
    Require(out.parameters().name() == model.parameters->name, "translated set name");
  }
  for (const auto& output : request.outputs()) Require(output.name() == "OUTPUT", "output name");
  Require(out.epsilon() > 0.0f, "translated epsilon");
  if (!request.parameters().contains("epsilon")) {
    Require(out.epsilon() == normsvc::server::kDefaultEpsilon, "default epsilon");
  }
  Require(!out.has_residual() && !out.return_residual_sum() && !out.return_statistics() &&
              out.output_dtype() == v1::DTYPE_UNSPECIFIED,
          "fields the protocol cannot set");
}

void CheckPlan(const ForwardPlan& plan, const KserveModel& model, const v1::NormalizeRequest& out) {
  Require(plan.op == model.op, "plan op");
  Require(plan.epsilon == out.epsilon(), "plan epsilon");
  Require(plan.input.hidden >= 1 && plan.input.rows >= 0, "input dimensions");
  const auto& shape = out.input().shape();
  Require(shape.size() >= 1 && shape.Get(shape.size() - 1) == plan.input.hidden, "hidden size");
  // A zero among the leading dimensions makes no rows, whatever the others
  // are; otherwise every partial product is at most the validated count.
  const bool empty = std::find(shape.begin(), shape.end() - 1, 0) != shape.end() - 1;
  int64_t rows = empty ? 0 : 1;
  for (int i = 0; !empty && i + 1 < shape.size(); ++i) rows *= shape.Get(i);
  Require(rows == plan.input.rows, "rows from INPUT's shape");
  Require(plan.input.bytes == rows * plan.input.hidden * Size(plan.input.dtype), "input bytes");
  RequireInside(plan.input.data, plan.input.bytes, out.input(), "INPUT view");
  Require(plan.out_dtype == plan.input.dtype, "OUTPUT dtype is INPUT's");
  Require(plan.residual == nullptr && !plan.return_residual_sum && !plan.return_statistics,
          "plan fields the protocol cannot set");
  const auto& params = plan.parameters;
  Require(params.set == model.parameters, "plan parameter set");
  if (params.set != nullptr) {
    Require(params.set->hidden == plan.input.hidden, "set hidden size");
    Require(params.gamma == nullptr && params.beta == nullptr, "inline views with a set");
    return;
  }
  const int64_t bytes = plan.input.hidden * Size(params.dtype);
  const auto& inline_params = out.parameters().inline_();
  if (params.gamma != nullptr) RequireInside(params.gamma, bytes, inline_params.gamma(), "GAMMA");
  if (params.beta != nullptr) RequireInside(params.beta, bytes, inline_params.beta(), "BETA");
  Require(params.inline_bytes ==
              (params.gamma != nullptr ? bytes : 0) + (params.beta != nullptr ? bytes : 0),
          "inline parameter bytes");
}

// The task and the response it sizes, then the reply as the server builds it.
void CheckTaskAndReply(const ForwardPlan& plan, const KserveModel& model,
                       const ModelInferRequest& request, const v1::NormalizeRequest& out) {
  v1::NormalizeResponse response;
  std::unique_ptr<normsvc::server::Task> task = normsvc::server::BuildForwardTask(
      plan, out, &response, absl::InfiniteFuture(), /*sink=*/nullptr);
  const int64_t bytes = plan.input.rows * plan.input.hidden * Size(plan.out_dtype);
  Require(task->rows == plan.input.rows && task->hidden == plan.input.hidden, "task size");
  Require(task->output_bytes == bytes, "task output bytes");
  Require(static_cast<int64_t>(response.output().data().size()) == bytes, "output bytes");
  Require(task->forward.out == response.output().data().data(), "output view");
  // What the executor would write; it must reach the reply unchanged.
  std::string* data = response.mutable_output()->mutable_data();
  for (size_t i = 0; i < data->size(); ++i) (*data)[i] = static_cast<char>(0xa5 ^ i);
  const std::string written = *data;
  inference::ModelInferResponse reply;
  normsvc::server::ToModelInferResponse(model, request, &response, &reply);
  Require(reply.model_name() == model.name && reply.id() == request.id(), "reply names");
  Require(reply.outputs_size() == 1 && reply.outputs(0).name() == "OUTPUT", "reply output");
  Require(reply.outputs(0).datatype() == normsvc::server::KserveDatatypeName(plan.out_dtype),
          "reply datatype");
  const auto& shape = out.input().shape();
  Require(std::equal(reply.outputs(0).shape().begin(), reply.outputs(0).shape().end(),
                     shape.begin(), shape.end()),
          "reply shape is INPUT's");
  Require(reply.raw_output_contents_size() == 1 && reply.raw_output_contents(0) == written,
          "reply bytes");
}

void FuzzInfer(const ModelInferRequest& request, const Fixture& f, const RequestLimits& limits) {
  absl::StatusOr<KserveModel> model =
      ResolveKserveModel(request.model_name(), request.model_version(), *f.store);
  if (!model.ok()) {
    Require(absl::IsNotFound(model.status()) || absl::IsFailedPrecondition(model.status()),
            "model resolution code");
    return Report(model.status());
  }
  CheckModel(*model, request, *f.store);
  v1::NormalizeRequest out;
  // The translation moves the raw contents out: a copy keeps `request`
  // whole for the checks.
  ModelInferRequest translated = request;
  if (absl::Status status = ToNormalizeRequest(*model, translated, &out); !status.ok()) {
    Require(absl::IsInvalidArgument(status), "translation code");
    return Report(status);
  }
  CheckTranslation(*model, request, out);
  // What the server reads after the translation is still there; the raw
  // bytes are not (moved into `out`).
  Require(translated.id() == request.id() && translated.model_name() == request.model_name() &&
              translated.inputs_size() == request.inputs_size() &&
              translated.outputs_size() == request.outputs_size() &&
              translated.raw_input_contents_size() == request.raw_input_contents_size(),
          "translation keeps the request's names and entries");
  for (const std::string& raw : translated.raw_input_contents()) {
    Require(raw.empty(), "raw contents moved out");
  }
  absl::StatusOr<ForwardPlan> plan = ValidateNormalize(out, limits, *f.store);
  if (!plan.ok()) {
    // The set named by a resolved model exists: NOT_FOUND cannot come here.
    Require(absl::IsInvalidArgument(plan.status()) || absl::IsFailedPrecondition(plan.status()),
            "validation code");
    const absl::Status error = ToKserveError(*model, plan.status());
    Require(error.code() == plan.status().code(), "ToKserveError keeps the code");
    Require(absl::StartsWith(error.message(), absl::StrCat("model '", model->name, "': ")),
            "ToKserveError names the model");
    return Report(error);
  }
  Report(absl::OkStatus());
  CheckPlan(*plan, *model, out);
  Require(plan->input.bytes <= limits.max_request_bytes, "request bytes limit");
  Require(plan->input.rows <= limits.max_request_rows, "request rows limit");
  CheckTaskAndReply(*plan, *model, translated, out);  // as the server replies
}

// ---- Seed corpus.

enum class Contents { kRaw, kTyped };

void AddInput(ModelInferRequest* r, const char* name, const char* datatype,
              std::vector<int64_t> shape, Contents contents) {
  auto* input = r->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  int64_t count = 1;
  for (int64_t dim : shape) {
    input->add_shape(dim);
    count *= dim;
  }
  if (contents == Contents::kTyped) {
    for (int64_t i = 0; i < count; ++i) input->mutable_contents()->add_fp32_contents(0.25f * i);
    return;
  }
  const int64_t element = std::string(datatype) == "FP32" ? 4 : 2;
  r->add_raw_input_contents(std::string(static_cast<size_t>(count * element), '\x3f'));
}

ModelInferRequest ForModel(const char* name) {
  ModelInferRequest r;
  r.set_model_name(name);
  return r;
}

void WriteSeeds(const std::string& dir) {
  constexpr Contents raw = Contents::kRaw;
  constexpr Contents typed = Contents::kTyped;
  // Plain models with inline parameters: each dtype, raw and typed contents,
  // epsilon as double, string and int64.
  for (const Contents contents : {raw, typed}) {
    ModelInferRequest r = ForModel("layernorm");
    r.set_model_version("1");
    r.set_id("req-1");
    AddInput(&r, "INPUT", "FP32", {2, 8}, contents);
    AddInput(&r, "GAMMA", "FP32", {8}, contents);
    AddInput(&r, "BETA", "FP32", {8}, contents);
    r.add_outputs()->set_name("OUTPUT");
    auto& epsilon = (*r.mutable_parameters())["epsilon"];
    contents == raw ? epsilon.set_double_param(1e-6) : epsilon.set_string_param("1e-5");
    const std::string name = contents == raw ? "layernorm_fp32_raw" : "layernorm_fp32_typed";
    WriteSeed(dir, name + "_gamma_beta", 0, r);
    WriteSeed(dir, name + "_default_limits", 1, r);
  }
  ModelInferRequest r = ForModel("layernorm");
  AddInput(&r, "INPUT", "FP16", {2, 3, 4}, raw);
  AddInput(&r, "GAMMA", "FP16", {4}, raw);
  WriteSeed(dir, "layernorm_fp16_raw_gamma", 0, r);
  r = ForModel("rmsnorm");
  AddInput(&r, "INPUT", "BF16", {3, 16}, raw);
  AddInput(&r, "GAMMA", "FP32", {16}, raw);
  (*r.mutable_parameters())["epsilon"].set_int64_param(1);
  WriteSeed(dir, "rmsnorm_bf16_raw_gamma_fp32", 0, r);
  r = ForModel("rmsnorm");
  AddInput(&r, "INPUT", "FP32", {0, 5}, typed);
  WriteSeed(dir, "rmsnorm_fp32_zero_rows", 0, r);
  // Models over the registered sets.
  r = ForModel("layernorm.ln");
  r.set_id("set");
  AddInput(&r, "INPUT", "FP32", {2, 3, 8}, raw);
  r.add_outputs()->set_name("OUTPUT");
  WriteSeed(dir, "layernorm_set_fp32", 0, r);
  r = ForModel("layernorm.ln");
  AddInput(&r, "INPUT", "FP32", {3, 8}, typed);
  (*r.mutable_parameters())["epsilon"].set_string_param("0.001");
  WriteSeed(dir, "layernorm_set_fp32_typed", 0, r);
  r = ForModel("rmsnorm.rms");
  AddInput(&r, "INPUT", "BF16", {4, 16}, raw);
  WriteSeed(dir, "rmsnorm_set_bf16", 0, r);
  WriteSeed(dir, "rmsnorm_set_bf16_default_limits", 1, r);
  r = ForModel("layernorm.rms");
  AddInput(&r, "INPUT", "BF16", {1, 16}, raw);
  WriteSeed(dir, "layernorm_set_without_beta_bf16", 0, r);
  r = ForModel("layernorm.half");
  AddInput(&r, "INPUT", "FP16", {5, 4}, raw);
  (*r.mutable_parameters())["epsilon"].set_double_param(1e-3);
  WriteSeed(dir, "layernorm_set_fp16", 0, r);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  normsvc::fuzz::InitializeRequestFuzzer(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Fixture& f = normsvc::fuzz::GetServerFixture();
  const RequestLimits& limits = data[0] % 2 == 0 ? f.small_limits : f.default_limits;
  ModelInferRequest request;
  if (!request.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  FuzzInfer(request, f, limits);
  return 0;
}
