// The per-server limits against a running server, on every path a request
// can take: the gRPC message size (--max_receive_message_bytes), rows
// (--max_request_rows) and hidden size (--max_hidden_size) through
// Normalize, NormalizeBackward, NormalizeStream and KServe ModelInfer, and
// the parameter-set budget (--max_parameter_sets, --max_parameter_bytes).
// Each refusal is checked for its code and its message; a request exactly
// at the limit succeeds and is checked against the oracle.
//
// Also covered elsewhere: Normalize rows, H and bytes in the validation
// table (validation_test.cc), the parameter limits' codes
// (ParameterLimitsTest), and the flags' ranges (options_test.cc). With the
// CUDA backend, a staging buffer too small for one row stops the start.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "inference/grpc_service.grpc.pb.h"
#include "server/gpu_backend.h"
#include "server/server.h"
#include "server/staging_layout.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

inference::ModelInferRequest KserveRequest(const v1::Tensor& input) {
  inference::ModelInferRequest request;
  request.set_model_name("layernorm");
  auto* tensor = request.add_inputs();
  tensor->set_name("INPUT");
  tensor->set_datatype("FP32");
  for (int64_t dim : input.shape()) tensor->add_shape(dim);
  request.add_raw_input_contents(input.data());
  return request;
}

class LimitsTest : public ::testing::Test {
 protected:
  void Start(const ServerOptions& options) {
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->grpc_port());
    grpc::ChannelArguments arguments;
    arguments.SetMaxSendMessageSize(-1);
    arguments.SetMaxReceiveMessageSize(-1);
    kserve_ =
        inference::GRPCInferenceService::NewStub(ConnectedChannel(server_->grpc_port(), arguments));
  }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(server_->Stop());
    }
  }
  v1::NormalizeRequest Forward(std::vector<int64_t> shape) {
    v1::NormalizeRequest request;
    request.set_request_id(++id_);
    request.set_op(v1::LAYER_NORM);
    *request.mutable_input() = ToProto(RandomTensor(rng_, DType::kF32, std::move(shape)));
    return request;
  }
  v1::NormalizeBackwardRequest Backward(std::vector<int64_t> shape) {
    v1::NormalizeBackwardRequest request;
    request.set_op(v1::RMS_NORM);
    *request.mutable_input() = ToProto(RandomTensor(rng_, DType::kF32, shape));
    *request.mutable_grad_output() = ToProto(RandomTensor(rng_, DType::kF32, shape));
    return request;
  }
  grpc::Status Normalize(const v1::NormalizeRequest& request) {
    v1::NormalizeResponse response;
    const grpc::Status status = stub_->Normalize(ContextWithDeadline().get(), request, &response);
    if (status.ok()) {
      EXPECT_TRUE(CheckForward(request, {}, {}, response));
    }
    return status;
  }
  grpc::Status NormalizeBackward(const v1::NormalizeBackwardRequest& request) {
    v1::NormalizeBackwardResponse response;
    const grpc::Status status =
        stub_->NormalizeBackward(ContextWithDeadline().get(), request, &response);
    if (status.ok()) {
      EXPECT_TRUE(CheckBackward(request, {}, response));
    }
    return status;
  }
  grpc::Status ModelInfer(const v1::NormalizeRequest& request) {
    inference::ModelInferResponse response;
    return kserve_->ModelInfer(ContextWithDeadline().get(), KserveRequest(request.input()),
                               &response);
  }
  // Sends `bad` then `good` over one NormalizeStream: the first gets its
  // error in the stream, which goes on and answers the second.
  void ExpectStreamRefusesThenServes(const v1::NormalizeRequest& bad,
                                     const v1::NormalizeRequest& good, const std::string& message) {
    auto context = ContextWithDeadline();
    auto stream = stub_->NormalizeStream(context.get());
    ASSERT_TRUE(stream->Write(bad));
    ASSERT_TRUE(stream->Write(good));
    ASSERT_TRUE(stream->WritesDone());
    v1::NormalizeStreamResponse response;
    int answered = 0;
    while (stream->Read(&response)) {
      ++answered;
      if (response.request_id() == bad.request_id()) {
        ASSERT_TRUE(response.has_error());
        EXPECT_EQ(response.error().code(), kInvalid);
        EXPECT_EQ(response.error().message(), message);
      } else {
        ASSERT_EQ(response.request_id(), good.request_id());
        ASSERT_TRUE(response.has_response()) << response.error().message();
        EXPECT_TRUE(CheckForward(good, {}, {}, response.response()));
      }
    }
    EXPECT_EQ(answered, 2);
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  std::mt19937_64 rng_{TestSeed() + 801};
  uint64_t id_ = 0;
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::Normalizer::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
};

TEST_F(LimitsTest, MessagesOverTheReceiveLimitAreRefusedByGrpcOnBothServices) {
  ServerOptions options = TestServerOptions();
  options.max_receive_message_bytes = int64_t{64} << 20;  // the smallest allowed
  options.max_request_bytes = int64_t{128} << 20;         // not the limit that refuses here
  Start(options);
  // 4097 rows of 4096 fp32: 16 KiB over the limit before any framing.
  const v1::NormalizeRequest large = Forward({4097, 4096});
  ASSERT_GT(large.ByteSizeLong(), size_t{64} << 20);
  for (const auto& [name, status] :
       {std::pair{"Normalize", Normalize(large)}, std::pair{"ModelInfer", ModelInfer(large)}}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(status.error_message().find("larger than max"), std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find(std::to_string(int64_t{64} << 20)), std::string::npos)
        << status.error_message();
  }
  // Just under the limit is served, and correct.
  EXPECT_TRUE(Normalize(Forward({4095, 4096})).ok());
}

TEST_F(LimitsTest, RowsOverTheLimitAreRefusedOnEveryPath) {
  ServerOptions options = TestServerOptions();
  options.max_request_rows = 100;
  Start(options);
  const std::string message = "input.shape: more rows than the limit of 100 (--max_request_rows)";
  const grpc::Status forward = Normalize(Forward({101, 8}));
  EXPECT_EQ(forward.error_code(), kInvalid);
  EXPECT_EQ(forward.error_message(), message);
  const grpc::Status split_rows = Normalize(Forward({2, 51, 8}));  // rows multiply: 102
  EXPECT_EQ(split_rows.error_code(), kInvalid);
  EXPECT_EQ(split_rows.error_message(), message);
  const grpc::Status backward = NormalizeBackward(Backward({101, 8}));
  EXPECT_EQ(backward.error_code(), kInvalid);
  EXPECT_EQ(backward.error_message(), message);
  ExpectStreamRefusesThenServes(Forward({101, 8}), Forward({100, 8}), message);
  const grpc::Status kserve = ModelInfer(Forward({101, 8}));
  EXPECT_EQ(kserve.error_code(), kInvalid);
  EXPECT_EQ(kserve.error_message().rfind("model 'layernorm': INPUT.", 0), 0u)
      << kserve.error_message();
  EXPECT_NE(kserve.error_message().find("more rows than the limit of 100 (--max_request_rows)"),
            std::string::npos)
      << kserve.error_message();
  // At the limit.
  EXPECT_TRUE(Normalize(Forward({100, 8})).ok());
  EXPECT_TRUE(NormalizeBackward(Backward({4, 25, 8})).ok());
  EXPECT_TRUE(ModelInfer(Forward({100, 8})).ok());
}

TEST_F(LimitsTest, HiddenSizesOverTheLimitAreRefusedOnEveryPath) {
  ServerOptions options = TestServerOptions();
  options.max_hidden_size = 256;
  Start(options);
  const std::string message =
      "input.shape: hidden size 257 exceeds the limit of 256 (--max_hidden_size)";
  const grpc::Status forward = Normalize(Forward({2, 257}));
  EXPECT_EQ(forward.error_code(), kInvalid);
  EXPECT_EQ(forward.error_message(), message);
  const grpc::Status backward = NormalizeBackward(Backward({2, 257}));
  EXPECT_EQ(backward.error_code(), kInvalid);
  EXPECT_EQ(backward.error_message(), message);
  ExpectStreamRefusesThenServes(Forward({2, 257}), Forward({2, 256}), message);
  const grpc::Status kserve = ModelInfer(Forward({2, 257}));
  EXPECT_EQ(kserve.error_code(), kInvalid);
  EXPECT_NE(kserve.error_message().find("hidden size 257 exceeds the limit of 256"),
            std::string::npos)
      << kserve.error_message();

  v1::RegisterParametersRequest too_wide;
  too_wide.set_name("too_wide");
  *too_wide.mutable_gamma() = ToProto(RandomTensor(rng_, DType::kF32, {257}));
  v1::RegisterParametersResponse registered;
  const grpc::Status parameters =
      stub_->RegisterParameters(ContextWithDeadline().get(), too_wide, &registered);
  EXPECT_EQ(parameters.error_code(), kInvalid);
  EXPECT_EQ(parameters.error_message(),
            "gamma.shape: hidden size 257 exceeds the limit of 256 (--max_hidden_size)");
  // At the limit.
  EXPECT_TRUE(Normalize(Forward({2, 256})).ok());
  EXPECT_TRUE(NormalizeBackward(Backward({2, 256})).ok());
  EXPECT_TRUE(ModelInfer(Forward({2, 256})).ok());
}

TEST_F(LimitsTest, ParameterSetsAndTheirBytesAreBoundedAndFreedByDelete) {
  ServerOptions options = TestServerOptions();
  options.max_parameter_sets = 2;
  options.max_parameter_bytes = 1000;
  Start(options);
  auto attempt = [&](const std::string& name, int64_t hidden, bool replace = false) {
    v1::RegisterParametersRequest request;
    request.set_name(name);
    request.set_replace(replace);
    *request.mutable_gamma() = ToProto(RandomTensor(rng_, DType::kF32, {hidden}));
    v1::RegisterParametersResponse response;
    return stub_->RegisterParameters(ContextWithDeadline().get(), request, &response);
  };
  ASSERT_TRUE(attempt("a", 150).ok());           // 600 bytes
  const grpc::Status bytes = attempt("b", 101);  // 404 more: 1004 > 1000
  EXPECT_EQ(bytes.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(bytes.error_message(),
            "gamma, beta: registering 404 bytes would exceed the 1000 bytes of "
            "--max_parameter_bytes (600 in use)");
  ASSERT_TRUE(attempt("b", 100).ok());  // exactly 1000
  const grpc::Status sets = attempt("c", 1);
  EXPECT_EQ(sets.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(sets.error_message(),
            "name: 2 parameter sets are registered, the limit (--max_parameter_sets)");
  // Replacing counts the new size in place of the old one.
  EXPECT_TRUE(attempt("a", 100, /*replace=*/true).ok());  // 400 + 400
  EXPECT_EQ(attempt("a", 151, /*replace=*/true).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);  // 604 + 400
  // Deleting gives both the set and its bytes back.
  v1::DeleteParametersRequest del;
  del.set_name("b");
  v1::DeleteParametersResponse deleted;
  ASSERT_TRUE(stub_->DeleteParameters(ContextWithDeadline().get(), del, &deleted).ok());
  EXPECT_TRUE(attempt("c", 150).ok());  // 400 + 600
}

// A staging buffer that could not hold one row of the largest request the
// limits admit stops the start, naming both flags, instead of failing such
// requests one by one later; one row's worth starts.
TEST(StagingLimitTest, AStagingBufferSmallerThanOneRowStopsTheStart) {
  if (VisibleGpuCount() == 0) {
    GTEST_SKIP() << (GpuBackendCompiled() ? "no GPU visible" : "this build has no CUDA backend")
                 << ": staging buffers belong to the CUDA backend";
  }
  ServerOptions options = TestServerOptions();
  options.backend = Backend::kCuda;
  options.max_hidden_size = 262144;
  options.staging_buffer_bytes = LargestRowStagingBytes(262144) - 1;
  Server refused(options);
  const absl::Status status = refused.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("--staging_buffer_bytes"), std::string::npos) << status;
  EXPECT_NE(status.message().find("--max_hidden_size 262144"), std::string::npos) << status;
  options.staging_buffer_bytes = LargestRowStagingBytes(262144);
  std::unique_ptr<Server> started = StartServer(options);
  ASSERT_NE(started, nullptr);
  EXPECT_TRUE(started->Stop());
}

}  // namespace
}  // namespace normsvc::server::testing
