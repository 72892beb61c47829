// The protocol mapping alone: model names, ModelInferRequest ->
// NormalizeRequest, NormalizeResponse -> ModelInferResponse, model
// description. No server (statistics: kserve_statistics_test.cc).
#include <cstring>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "inference/model_config.pb.h"
#include "server/kserve_models.h"
#include "server/kserve_request.h"
#include "server/parameter_store.h"

namespace normsvc::server {
namespace {

using inference::ModelInferRequest;

std::vector<float> RandomFloats(size_t count) {
  static std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.5f, 2.0f);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

ModelInferRequest::InferInputTensor* AddInput(ModelInferRequest& request, const char* name,
                                              const char* datatype, std::vector<int64_t> shape) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t dim : shape) input->add_shape(dim);
  return input;
}

class KserveMappingTest : public ::testing::Test {
 protected:
  ParameterStore store_{ParameterLimits{}, {}};
  KserveModel layernorm_ = *ResolveKserveModel("layernorm", "", store_);
  KserveModel rmsnorm_ = *ResolveKserveModel("rmsnorm", "1", store_);
};

TEST_F(KserveMappingTest, ModelNamesResolveToTheirOpAndUnknownOnesAreNotFound) {
  EXPECT_EQ(layernorm_.op, kernels::NormOp::kLayerNorm);
  EXPECT_EQ(rmsnorm_.op, kernels::NormOp::kRmsNorm);
  EXPECT_EQ(layernorm_.parameters, nullptr);
  EXPECT_TRUE(absl::IsNotFound(ResolveKserveModel("softmax", "", store_).status()));
  EXPECT_TRUE(absl::IsNotFound(ResolveKserveModel("layernorm", "2", store_).status()));
  const auto missing_set = ResolveKserveModel("layernorm.nope", "", store_).status();
  EXPECT_TRUE(absl::IsNotFound(missing_set));
  EXPECT_NE(missing_set.message().find("no parameter set 'nope'"), std::string::npos);
  const auto models = ListKserveModels(store_);
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].name, "layernorm");
  EXPECT_EQ(models[1].name, "rmsnorm");
}

TEST_F(KserveMappingTest, RawAndTypedFp32ContentsGiveTheSameTensor) {
  const std::vector<float> x = RandomFloats(3 * 16);
  const std::vector<float> gamma = RandomFloats(16);
  ModelInferRequest raw;
  raw.set_model_name("layernorm");
  AddInput(raw, "INPUT", "FP32", {3, 16});
  AddInput(raw, "GAMMA", "FP32", {16});
  raw.add_raw_input_contents(Bytes(x));
  raw.add_raw_input_contents(Bytes(gamma));
  (*raw.mutable_parameters())["epsilon"].set_double_param(0.25);
  v1::NormalizeRequest from_raw;
  ASSERT_TRUE(ToNormalizeRequest(layernorm_, raw, &from_raw).ok());

  ModelInferRequest typed;
  auto* in = AddInput(typed, "INPUT", "FP32", {3, 16});
  for (float v : x) in->mutable_contents()->add_fp32_contents(v);
  auto* g = AddInput(typed, "GAMMA", "FP32", {16});
  for (float v : gamma) g->mutable_contents()->add_fp32_contents(v);
  (*typed.mutable_parameters())["epsilon"].set_string_param("0.25");
  v1::NormalizeRequest from_typed;
  ASSERT_TRUE(ToNormalizeRequest(layernorm_, typed, &from_typed).ok());

  for (const v1::NormalizeRequest* r : {&from_raw, &from_typed}) {
    EXPECT_EQ(r->op(), v1::LAYER_NORM);
    EXPECT_EQ(r->input().dtype(), v1::FP32);
    EXPECT_EQ(std::vector<int64_t>(r->input().shape().begin(), r->input().shape().end()),
              (std::vector<int64_t>{3, 16}));
    EXPECT_EQ(r->input().data(), Bytes(x));
    EXPECT_EQ(r->parameters().inline_().gamma().data(), Bytes(gamma));
    EXPECT_FALSE(r->parameters().inline_().has_beta());
    EXPECT_FLOAT_EQ(r->epsilon(), 0.25f);
  }
}

TEST_F(KserveMappingTest, HalfPrecisionRawBytesPassThroughWithTheirDtype) {
  ModelInferRequest request;
  AddInput(request, "INPUT", "BF16", {2, 4});
  const std::string bytes(
      "\x01\x02\x03\x04\x05\x06\x07\x08"
      "\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10",
      16);
  request.add_raw_input_contents(bytes);
  v1::NormalizeRequest out;
  ASSERT_TRUE(ToNormalizeRequest(rmsnorm_, request, &out).ok());
  EXPECT_EQ(out.op(), v1::RMS_NORM);
  EXPECT_EQ(out.input().dtype(), v1::BF16);
  EXPECT_EQ(out.input().data(), bytes);
  // Moved, not copied: the request holds the bytes no more.
  EXPECT_TRUE(request.raw_input_contents(0).empty());
  EXPECT_FLOAT_EQ(out.epsilon(), kDefaultEpsilon);
}

struct BadCase {
  const char* what;
  std::function<void(ModelInferRequest&)> edit;
  const char* message;
};

TEST_F(KserveMappingTest, MalformedRequestsAreInvalidArgumentNamingTheCulprit) {
  const std::vector<BadCase> cases = {
      {"no INPUT", [](ModelInferRequest& r) { r.mutable_inputs(0)->set_name("X"); },
       "unknown input"},
      {"missing INPUT",
       [](ModelInferRequest& r) {
         r.clear_inputs();
         r.clear_raw_input_contents();
       },
       "'INPUT' is missing"},
      {"datatype", [](ModelInferRequest& r) { r.mutable_inputs(0)->set_datatype("INT8"); },
       "datatype 'INT8'"},
      {"raw count", [](ModelInferRequest& r) { r.add_raw_input_contents("xx"); },
       "raw_input_contents has 2 entries for 1 inputs"},
      {"twice",
       [](ModelInferRequest& r) {
         *r.add_inputs() = r.inputs(0);
         r.add_raw_input_contents(r.raw_input_contents(0));
       },
       "given twice"},
      {"rms beta",
       [](ModelInferRequest& r) {
         r.set_model_name("rmsnorm");
         AddInput(r, "BETA", "FP32", {8});
         r.add_raw_input_contents(std::string(32, '\1'));
       },
       "rmsnorm has no beta"},
      {"fp16 typed",
       [](ModelInferRequest& r) {
         r.clear_raw_input_contents();
         r.mutable_inputs(0)->set_datatype("FP16");
         r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
       },
       "must come in raw_input_contents"},
      {"output", [](ModelInferRequest& r) { r.add_outputs()->set_name("MEAN"); },
       "output 'MEAN' does not exist"},
      {"epsilon <0",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["epsilon"].set_double_param(-1); },
       "epsilon"},
      {"epsilon 0",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["epsilon"].set_int64_param(0); },
       "epsilon"},
      {"epsilon underflow",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["epsilon"].set_double_param(1e-60); },
       "epsilon"},
      {"epsilon overflow",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["epsilon"].set_double_param(1e300); },
       "parameter 'epsilon' must be finite"},
      {"epsilon inf text",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["epsilon"].set_string_param("inf"); },
       "parameter 'epsilon' must be finite"},
      {"epsilon text",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["epsilon"].set_string_param("e"); },
       "not a number"},
      {"epsilon bool",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["epsilon"].set_bool_param(true); },
       "must be a double"},
  };
  for (const BadCase& c : cases) {
    ModelInferRequest request;
    request.set_model_name("layernorm");
    AddInput(request, "INPUT", "FP32", {2, 8});
    request.add_raw_input_contents(Bytes(RandomFloats(16)));
    c.edit(request);
    const KserveModel& model = request.model_name() == "rmsnorm" ? rmsnorm_ : layernorm_;
    v1::NormalizeRequest out;
    const absl::Status status = ToNormalizeRequest(model, request, &out);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.what << ": " << status;
    EXPECT_NE(status.message().find(c.message), std::string::npos) << c.what << ": " << status;
  }
}

TEST_F(KserveMappingTest, ResponseTakesTheOutputBytesWithNameShapeAndId) {
  ModelInferRequest request;
  request.set_id("req-7");
  const std::string bytes = Bytes(RandomFloats(6));
  v1::NormalizeResponse result;
  result.mutable_output()->set_dtype(v1::FP32);
  result.mutable_output()->add_shape(2);
  result.mutable_output()->add_shape(3);
  result.mutable_output()->set_data(bytes);
  inference::ModelInferResponse out;
  ToModelInferResponse(rmsnorm_, request, &result, &out);
  EXPECT_EQ(out.model_name(), "rmsnorm");
  EXPECT_EQ(out.model_version(), "1");
  EXPECT_EQ(out.id(), "req-7");
  ASSERT_EQ(out.outputs_size(), 1);
  EXPECT_EQ(out.outputs(0).name(), "OUTPUT");
  EXPECT_EQ(out.outputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(out.outputs(0).shape().begin(), out.outputs(0).shape().end()),
            (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(out.raw_output_contents_size(), 1);
  EXPECT_EQ(out.raw_output_contents(0), bytes);
}

TEST_F(KserveMappingTest, ValidationErrorsSpeakOfTensorsNotNormalizerFields) {
  const absl::Status input = ToKserveError(
      layernorm_, absl::InvalidArgumentError("input.data: has 12 bytes, shape needs 16"));
  EXPECT_TRUE(absl::IsInvalidArgument(input));
  EXPECT_EQ(input.message(), "model 'layernorm': INPUT.data: has 12 bytes, shape needs 16");
  const absl::Status gamma = ToKserveError(
      rmsnorm_, absl::FailedPreconditionError(
                    "parameters.inline.beta.dtype: must equal parameters.inline.gamma.dtype"));
  EXPECT_TRUE(absl::IsFailedPrecondition(gamma));
  EXPECT_EQ(gamma.message(), "model 'rmsnorm': BETA.dtype: must equal GAMMA.dtype");
}

TEST_F(KserveMappingTest, MetadataAndConfigDescribeTheModelsInputs) {
  inference::ModelMetadataResponse meta;
  DescribeKserveModel(rmsnorm_, &meta);
  EXPECT_EQ(meta.name(), "rmsnorm");
  ASSERT_EQ(meta.inputs_size(), 2);  // INPUT, GAMMA: no BETA for RMSNorm
  EXPECT_EQ(meta.inputs(0).name(), "INPUT");
  EXPECT_EQ(meta.inputs(1).name(), "GAMMA");
  inference::ModelConfig config;
  ConfigureKserveModel(layernorm_, &config);
  EXPECT_EQ(config.max_batch_size(), 0);
  ASSERT_EQ(config.input_size(), 3);
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(std::vector<int64_t>(config.input(0).dims().begin(), config.input(0).dims().end()),
            (std::vector<int64_t>{-1, -1}));
  EXPECT_FALSE(config.input(0).optional());
  EXPECT_TRUE(config.input(2).optional());
  EXPECT_EQ(config.output(0).name(), "OUTPUT");
  EXPECT_EQ(KserveDatatypeFromName("FP16"), kernels::DType::kF16);
  EXPECT_EQ(KserveDatatypeFromName("fp32"), std::nullopt);
}

}  // namespace
}  // namespace normsvc::server
