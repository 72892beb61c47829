// Edge validation, end to end: a table of bad requests, each sent to a
// running server and answered with its expected code and a message naming
// the field, while correct traffic runs alongside and stays correct.
#include <atomic>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "server/validation.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

struct BadForward {
  const char* name;
  std::function<void(v1::NormalizeRequest&)> mutate;
  grpc::StatusCode code;
  const char* message;  // must appear in the error message
};

struct BadBackward {
  const char* name;
  std::function<void(v1::NormalizeBackwardRequest&)> mutate;
  grpc::StatusCode code;
  const char* message;
};

struct BadRegister {
  const char* name;
  std::function<void(v1::RegisterParametersRequest&)> mutate;
  grpc::StatusCode code;
  const char* message;
};

constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

v1::Tensor Tensor(v1::DType dtype, std::vector<int64_t> shape, size_t bytes) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t dim : shape) tensor.add_shape(dim);
  tensor.set_data(std::string(bytes, '\x3c'));
  return tensor;
}

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = TestServerOptions();
    options.max_hidden_size = 8192;
    options.max_request_rows = 1000;
    options.max_request_bytes = 1 << 20;
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->grpc_port());
    // Sets the table refers to.
    Register("h128", Tensor(v1::FP32, {128}, 512), {});
    Register("fp16_h64", Tensor(v1::FP16, {64}, 128), {});
    Register("with_beta", Tensor(v1::FP32, {64}, 256), Tensor(v1::FP32, {64}, 256));
    // Correct traffic alongside the table, checked against the oracle.
    for (int c = 0; c < 2; ++c) {
      background_.emplace_back([this, c] {
        std::mt19937_64 rng(TestSeed() + 77 + c);
        auto stub = Connect(server_->grpc_port());
        for (uint64_t i = 0; !stop_.load() || i < 10; ++i) {
          ForwardCase fc;
          fc.dtype = static_cast<DType>(i % 3);
          fc.shape = {3, 64 + static_cast<int64_t>(i % 5)};
          fc.inline_gamma = fc.inline_beta = true;
          ForwardRequest made = MakeForwardRequest(rng, fc, i);
          v1::NormalizeResponse response;
          auto context = ContextWithDeadline();
          const grpc::Status status = stub->Normalize(context.get(), made.request, &response);
          if (!status.ok() || !CheckForward(made.request, made.gamma, made.beta, response)) {
            background_failures_.fetch_add(1);
          }
          background_ok_.fetch_add(1);
        }
      });
    }
  }
  void TearDown() override {
    stop_.store(true);
    for (auto& thread : background_) thread.join();
    EXPECT_EQ(background_failures_.load(), 0);
    EXPECT_GE(background_ok_.load(), 20);
    if (server_) {
      EXPECT_TRUE(server_->Stop());
    }
  }
  void Register(const std::string& name, v1::Tensor gamma, std::optional<v1::Tensor> beta) {
    v1::RegisterParametersRequest request;
    request.set_name(name);
    *request.mutable_gamma() = std::move(gamma);
    if (beta) *request.mutable_beta() = *beta;
    v1::RegisterParametersResponse response;
    auto context = ContextWithDeadline();
    ASSERT_TRUE(stub_->RegisterParameters(context.get(), request, &response).ok()) << name;
  }
  static v1::NormalizeRequest ValidForward() {
    v1::NormalizeRequest request;
    request.set_op(v1::LAYER_NORM);
    *request.mutable_input() = Tensor(v1::FP32, {2, 64}, 512);
    return request;
  }
  static v1::NormalizeBackwardRequest ValidBackward() {
    v1::NormalizeBackwardRequest request;
    request.set_op(v1::LAYER_NORM);
    *request.mutable_input() = Tensor(v1::FP32, {2, 64}, 512);
    *request.mutable_grad_output() = Tensor(v1::FP32, {2, 64}, 512);
    return request;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::Normalizer::Stub> stub_;
  std::vector<std::thread> background_;
  std::atomic<bool> stop_{false};
  std::atomic<int> background_ok_{0};
  std::atomic<int> background_failures_{0};
};

TEST_F(ValidationTest, BadNormalizeRequestsGetTheirCodeAndAMessageNamingTheField) {
  const BadForward table[] = {
      {"op unset", [](auto& r) { r.set_op(v1::NORM_OP_UNSPECIFIED); }, kInvalid,
       "op: must be LAYER_NORM or RMS_NORM"},
      {"op unknown", [](auto& r) { r.set_op(static_cast<v1::NormOp>(7)); }, kInvalid,
       "op: must be"},
      {"input missing", [](auto& r) { r.clear_input(); }, kInvalid, "input: required"},
      {"dtype unset", [](auto& r) { r.mutable_input()->set_dtype(v1::DTYPE_UNSPECIFIED); },
       kInvalid, "input.dtype: must be FP32, FP16 or BF16"},
      {"dtype unknown", [](auto& r) { r.mutable_input()->set_dtype(static_cast<v1::DType>(42)); },
       kInvalid, "input.dtype:"},
      {"no dimensions", [](auto& r) { r.mutable_input()->clear_shape(); }, kInvalid,
       "input.shape: must have at least one dimension"},
      {"negative dimension", [](auto& r) { r.mutable_input()->set_shape(0, -2); }, kInvalid,
       "input.shape[0]: must be >= 0"},
      {"hidden size 0", [](auto& r) { r.mutable_input()->set_shape(1, 0); }, kInvalid,
       "input.shape: the last dimension (hidden size) must be >= 1"},
      {"hidden size over the limit",
       [](auto& r) {
         *r.mutable_input() = Tensor(v1::FP32, {1, 8193}, 8193 * 4);
       },
       kInvalid, "input.shape: hidden size 8193 exceeds the limit of 8192 (--max_hidden_size)"},
      {"rows over the limit",
       [](auto& r) {
         *r.mutable_input() = Tensor(v1::FP32, {1001, 4}, 16);
       },
       kInvalid, "input.shape: more rows than the limit of 1000 (--max_request_rows)"},
      {"dimensions whose product overflows",
       [](auto& r) {
         *r.mutable_input() = Tensor(v1::FP32, {int64_t{1} << 40, int64_t{1} << 40, 4}, 16);
       },
       kInvalid, "(--max_request_rows)"},
      {"bytes over the limit",
       [](auto& r) {
         *r.mutable_input() = Tensor(v1::FP32, {100, 4096}, 16);
       },
       kInvalid, "input.shape: 1638400 bytes exceed the limit of 1048576 (--max_request_bytes)"},
      {"data too short", [](auto& r) { r.mutable_input()->mutable_data()->resize(100); }, kInvalid,
       "input.data: 100 bytes, but shape [2, 64] of FP32 needs 512"},
      {"data too long", [](auto& r) { r.mutable_input()->mutable_data()->append("x"); }, kInvalid,
       "input.data: 513 bytes"},
      {"epsilon NaN", [](auto& r) { r.set_epsilon(std::nanf("")); }, kInvalid,
       "epsilon: must be finite and > 0"},
      {"epsilon negative", [](auto& r) { r.set_epsilon(-1e-5f); }, kInvalid,
       "epsilon: must be finite and > 0"},
      {"epsilon infinite", [](auto& r) { r.set_epsilon(INFINITY); }, kInvalid, "epsilon:"},
      {"output dtype unknown", [](auto& r) { r.set_output_dtype(static_cast<v1::DType>(9)); },
       kInvalid, "output_dtype: must be FP32, FP16, BF16 or unset"},
      {"residual dtype",
       [](auto& r) {
         *r.mutable_residual() = Tensor(v1::FP16, {2, 64}, 256);
       },
       kInvalid, "residual.dtype: must equal input.dtype (FP32)"},
      {"residual shape", [](auto& r) { *r.mutable_residual() = Tensor(v1::FP32, {128}, 512); },
       kInvalid, "residual.shape: must equal input.shape [2, 64]"},
      {"residual data",
       [](auto& r) {
         *r.mutable_residual() = Tensor(v1::FP32, {2, 64}, 500);
       },
       kInvalid, "residual.data: 500 bytes"},
      {"residual sum without residual", [](auto& r) { r.set_return_residual_sum(true); }, kInvalid,
       "return_residual_sum: requires residual"},
      {"inline gamma shape",
       [](auto& r) {
         *r.mutable_parameters()->mutable_inline_()->mutable_gamma() = Tensor(v1::FP32, {63}, 252);
       },
       kInvalid, "parameters.inline.gamma.shape: must be [64]"},
      {"inline gamma dtype",
       [](auto& r) {
         *r.mutable_input() = Tensor(v1::BF16, {2, 64}, 256);
         *r.mutable_parameters()->mutable_inline_()->mutable_gamma() = Tensor(v1::FP16, {64}, 128);
       },
       kInvalid, "parameters.inline.gamma.dtype: must be FP32 or the input dtype (BF16)"},
      {"inline gamma data",
       [](auto& r) {
         *r.mutable_parameters()->mutable_inline_()->mutable_gamma() = Tensor(v1::FP32, {64}, 255);
       },
       kInvalid, "parameters.inline.gamma.data: 255 bytes"},
      {"inline beta for RMS_NORM",
       [](auto& r) {
         r.set_op(v1::RMS_NORM);
         *r.mutable_parameters()->mutable_inline_()->mutable_beta() = Tensor(v1::FP32, {64}, 256);
       },
       kInvalid, "parameters.inline.beta: RMS_NORM takes no beta"},
      {"inline beta dtype differs from gamma",
       [](auto& r) {
         auto* params = r.mutable_parameters()->mutable_inline_();
         *params->mutable_gamma() = Tensor(v1::FP32, {64}, 256);
         *r.mutable_input() = Tensor(v1::FP16, {2, 64}, 256);
         *params->mutable_beta() = Tensor(v1::FP16, {64}, 128);
       },
       kInvalid, "parameters.inline.beta.dtype: must equal parameters.inline.gamma.dtype"},
      {"unknown parameter set", [](auto& r) { r.mutable_parameters()->set_name("missing"); },
       grpc::StatusCode::NOT_FOUND, "parameters.name: no parameter set named 'missing'"},
      {"parameter set of another hidden size",
       [](auto& r) { r.mutable_parameters()->set_name("h128"); },
       grpc::StatusCode::FAILED_PRECONDITION,
       "parameters.name: set 'h128' has hidden size 128, but the input has 64"},
      {"parameter set of another dtype",
       [](auto& r) {
         *r.mutable_input() = Tensor(v1::BF16, {2, 64}, 256);
         r.mutable_parameters()->set_name("fp16_h64");
       },
       grpc::StatusCode::FAILED_PRECONDITION,
       "parameters.name: set 'fp16_h64' is FP16; it must be FP32 or the input dtype (BF16)"},
      {"parameter set with beta for RMS_NORM",
       [](auto& r) {
         r.set_op(v1::RMS_NORM);
         r.mutable_parameters()->set_name("with_beta");
       },
       grpc::StatusCode::FAILED_PRECONDITION,
       "set 'with_beta' has beta, which RMS_NORM does not take"},
  };
  for (const BadForward& bad : table) {
    SCOPED_TRACE(bad.name);
    v1::NormalizeRequest request = ValidForward();
    bad.mutate(request);
    v1::NormalizeResponse response;
    auto context = ContextWithDeadline(10);
    const grpc::Status status = stub_->Normalize(context.get(), request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << status.error_message();
    EXPECT_NE(status.error_message().find(bad.message), std::string::npos)
        << status.error_message();
  }
  // The base request itself is fine: the table's failures come from its edits.
  v1::NormalizeResponse response;
  auto context = ContextWithDeadline(10);
  EXPECT_TRUE(stub_->Normalize(context.get(), ValidForward(), &response).ok());
}

// Normalize reads its request from the received bytes itself (a raw
// method): bytes that are no NormalizeRequest get INVALID_ARGUMENT, and
// no bytes at all are the request of all defaults, whose op is refused.
TEST_F(ValidationTest, NormalizeBytesThatAreNoRequestGetInvalidArgument) {
  const std::string valid = ValidForward().SerializeAsString();
  const struct {
    const char* name;
    std::string bytes;
    const char* message;
  } table[] = {
      {"truncated inside the input data", valid.substr(0, valid.size() - 10),
       "not a valid normsvc.v1.NormalizeRequest"},
      {"an invalid wire type", std::string("\x0f\x01", 2),
       "not a valid normsvc.v1.NormalizeRequest"},
      {"empty", std::string(), "op: must be LAYER_NORM or RMS_NORM"},
  };
  for (const auto& bad : table) {
    SCOPED_TRACE(bad.name);
    std::string reply;
    const grpc::Status status =
        RawUnaryCall(server_->grpc_port(), "/normsvc.v1.Normalizer/Normalize", bad.bytes, &reply);
    EXPECT_EQ(status.error_code(), kInvalid) << status.error_message();
    EXPECT_NE(status.error_message().find(bad.message), std::string::npos)
        << status.error_message();
  }
}

TEST_F(ValidationTest, BadBackwardRequestsGetTheirCodeAndAMessageNamingTheField) {
  const BadBackward table[] = {
      {"op unset", [](auto& r) { r.clear_op(); }, kInvalid, "op: must be LAYER_NORM or RMS_NORM"},
      {"grad_output missing", [](auto& r) { r.clear_grad_output(); }, kInvalid,
       "grad_output: required"},
      {"grad_output shape",
       [](auto& r) {
         *r.mutable_grad_output() = Tensor(v1::FP32, {64, 2}, 512);
       },
       kInvalid, "grad_output.shape: must equal input.shape [2, 64]"},
      {"grad_output dtype",
       [](auto& r) {
         *r.mutable_grad_output() = Tensor(v1::BF16, {2, 64}, 256);
       },
       kInvalid, "grad_output.dtype: must equal input.dtype (FP32)"},
      {"saved mean for RMS_NORM",
       [](auto& r) {
         r.set_op(v1::RMS_NORM);
         *r.mutable_mean() = Tensor(v1::FP32, {2}, 8);
         *r.mutable_rstd() = Tensor(v1::FP32, {2}, 8);
       },
       kInvalid, "mean: RMS_NORM takes no saved mean"},
      {"mean without rstd", [](auto& r) { *r.mutable_mean() = Tensor(v1::FP32, {2}, 8); }, kInvalid,
       "rstd: LAYER_NORM takes both saved statistics (mean and rstd) or neither"},
      {"rstd dtype",
       [](auto& r) {
         *r.mutable_mean() = Tensor(v1::FP32, {2}, 8);
         *r.mutable_rstd() = Tensor(v1::FP16, {2}, 4);
       },
       kInvalid, "rstd.dtype: must be FP32"},
      {"rstd shape",
       [](auto& r) {
         *r.mutable_mean() = Tensor(v1::FP32, {2}, 8);
         *r.mutable_rstd() = Tensor(v1::FP32, {2, 1}, 8);
       },
       kInvalid, "rstd.shape: must be input.shape without its last dimension, [2]"},
      {"epsilon", [](auto& r) { r.set_epsilon(-3); }, kInvalid, "epsilon: must be finite and > 0"},
      {"unknown parameter set", [](auto& r) { r.mutable_parameters()->set_name("nope"); },
       grpc::StatusCode::NOT_FOUND, "parameters.name: no parameter set named 'nope'"},
  };
  for (const BadBackward& bad : table) {
    SCOPED_TRACE(bad.name);
    v1::NormalizeBackwardRequest request = ValidBackward();
    bad.mutate(request);
    v1::NormalizeBackwardResponse response;
    auto context = ContextWithDeadline(10);
    const grpc::Status status = stub_->NormalizeBackward(context.get(), request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << status.error_message();
    EXPECT_NE(status.error_message().find(bad.message), std::string::npos)
        << status.error_message();
  }
  v1::NormalizeBackwardResponse response;
  auto context = ContextWithDeadline(10);
  EXPECT_TRUE(stub_->NormalizeBackward(context.get(), ValidBackward(), &response).ok());
}

TEST_F(ValidationTest, BadParameterRequestsGetTheirCodeAndAMessageNamingTheField) {
  const BadRegister table[] = {
      {"name with a space", [](auto& r) { r.set_name("a b"); }, kInvalid,
       "name: must match [A-Za-z0-9._-]{1,128}"},
      {"empty name", [](auto& r) { r.clear_name(); }, kInvalid, "name: must match"},
      {"name too long", [](auto& r) { r.set_name(std::string(129, 'a')); }, kInvalid,
       "name: must match"},
      {"neither gamma nor beta", [](auto& r) { r.clear_gamma(); }, kInvalid,
       "gamma, beta: a parameter set needs at least one of them"},
      {"gamma of two dimensions",
       [](auto& r) {
         *r.mutable_gamma() = Tensor(v1::FP32, {2, 32}, 256);
       },
       kInvalid, "gamma.shape: must have one dimension, [H]"},
      {"gamma dtype", [](auto& r) { r.mutable_gamma()->set_dtype(v1::DTYPE_UNSPECIFIED); },
       kInvalid, "gamma.dtype: must be FP32, FP16 or BF16"},
      {"gamma data", [](auto& r) { r.mutable_gamma()->mutable_data()->resize(3); }, kInvalid,
       "gamma.data: 3 bytes, but shape [64] of FP32 needs 256"},
      {"gamma too large", [](auto& r) { *r.mutable_gamma() = Tensor(v1::FP32, {8193}, 8193 * 4); },
       kInvalid, "gamma.shape: hidden size 8193 exceeds the limit of 8192"},
      {"beta dtype", [](auto& r) { *r.mutable_beta() = Tensor(v1::FP16, {64}, 128); }, kInvalid,
       "beta.dtype: must equal gamma.dtype"},
      {"beta shape", [](auto& r) { *r.mutable_beta() = Tensor(v1::FP32, {32}, 128); }, kInvalid,
       "beta.shape: must equal gamma.shape"},
      {"existing name", [](auto& r) { r.set_name("h128"); }, grpc::StatusCode::ALREADY_EXISTS,
       "name: a parameter set named 'h128' exists (set replace to overwrite it)"},
  };
  for (const BadRegister& bad : table) {
    SCOPED_TRACE(bad.name);
    v1::RegisterParametersRequest request;
    request.set_name("fresh");
    *request.mutable_gamma() = Tensor(v1::FP32, {64}, 256);
    bad.mutate(request);
    v1::RegisterParametersResponse response;
    auto context = ContextWithDeadline(10);
    const grpc::Status status = stub_->RegisterParameters(context.get(), request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << status.error_message();
    EXPECT_NE(status.error_message().find(bad.message), std::string::npos)
        << status.error_message();
  }
  v1::DeleteParametersRequest del;
  del.set_name("never_registered");
  v1::DeleteParametersResponse deleted;
  auto context = ContextWithDeadline(10);
  const grpc::Status status = stub_->DeleteParameters(context.get(), del, &deleted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("name: no parameter set named 'never_registered'"),
            std::string::npos);
}

// The size ValidateNormalize holds a forward reply to (one gRPC message):
// every result tensor's bytes, by its dtype.
TEST(ForwardReplySizeTest, CountsEveryResultTensor) {
  ForwardPlan plan;
  plan.op = kernels::NormOp::kLayerNorm;
  plan.input.dtype = kernels::DType::kBF16;
  plan.input.rows = 3;
  plan.input.hidden = 5;
  plan.input.bytes = 3 * 5 * 2;
  plan.out_dtype = kernels::DType::kF32;
  EXPECT_EQ(ForwardReplyDataBytes(plan), 3 * 5 * 4);
  plan.return_residual_sum = true;
  EXPECT_EQ(ForwardReplyDataBytes(plan), 3 * 5 * 4 + 3 * 5 * 2);
  plan.return_statistics = true;  // mean and rstd, fp32 a row
  EXPECT_EQ(ForwardReplyDataBytes(plan), 3 * 5 * 4 + 3 * 5 * 2 + 3 * 4 * 2);
  plan.op = kernels::NormOp::kRmsNorm;  // rstd only
  EXPECT_EQ(ForwardReplyDataBytes(plan), 3 * 5 * 4 + 3 * 5 * 2 + 3 * 4);
  // 2^29 bf16 elements returned as fp32: 2 GiB of output alone, over what
  // one message holds.
  plan.input.rows = int64_t{1} << 19;
  plan.input.hidden = 1024;
  plan.input.bytes = plan.input.rows * plan.input.hidden * 2;
  EXPECT_GT(ForwardReplyDataBytes(plan), kMaxReplyDataBytes);
}

TEST(ParameterLimitsTest, SetCountAndBytesAreBounded) {
  ServerOptions options = TestServerOptions();
  options.max_parameter_sets = 2;
  options.max_parameter_bytes = 1000;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->grpc_port());
  auto attempt = [&](const std::string& name, int64_t hidden) {
    v1::RegisterParametersRequest request;
    request.set_name(name);
    *request.mutable_gamma() = Tensor(v1::FP32, {hidden}, hidden * 4);
    v1::RegisterParametersResponse response;
    auto context = ContextWithDeadline(10);
    return stub->RegisterParameters(context.get(), request, &response);
  };
  EXPECT_TRUE(attempt("a", 100).ok());                                              // 400 bytes
  EXPECT_EQ(attempt("b", 200).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);  // 1200 > 1000
  EXPECT_TRUE(attempt("b", 100).ok());                                              // 800
  const grpc::Status third = attempt("c", 1);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(third.error_message().find("--max_parameter_sets"), std::string::npos);
  EXPECT_TRUE(server->Stop());
}

}  // namespace
}  // namespace normsvc::server::testing
