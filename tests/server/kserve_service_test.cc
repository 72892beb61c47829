// inference.GRPCInferenceService end to end in process: every implemented
// RPC through the generated C++ stub against a CPU-backend server on
// loopback; ModelInfer results checked against the double-precision oracle.
#include <cstring>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "inference/grpc_service.grpc.pb.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

const char* DatatypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "FP32";
    case DType::kF16:
      return "FP16";
    case DType::kBF16:
      return "BF16";
  }
  return "";
}

void AddRawInput(inference::ModelInferRequest& request, const char* name, const v1::Tensor& t) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(t.dtype() == v1::FP32 ? "FP32" : t.dtype() == v1::FP16 ? "FP16" : "BF16");
  for (int64_t dim : t.shape()) input->add_shape(dim);
  request.add_raw_input_contents(t.data());
}

// The KServe request equivalent to a normsvc.v1 forward request (raw bytes).
inference::ModelInferRequest ToKserve(const std::string& model, const v1::NormalizeRequest& r) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id("id-" + std::to_string(r.request_id()));
  AddRawInput(request, "INPUT", r.input());
  if (r.parameters().has_inline_()) {
    if (r.parameters().inline_().has_gamma())
      AddRawInput(request, "GAMMA", r.parameters().inline_().gamma());
    if (r.parameters().inline_().has_beta())
      AddRawInput(request, "BETA", r.parameters().inline_().beta());
  }
  if (r.epsilon() != 0) (*request.mutable_parameters())["epsilon"].set_double_param(r.epsilon());
  return request;
}

// The reply as a NormalizeResponse, for the oracle; the id "id-<n>" that
// ToKserve sent comes back as request_id n.
v1::NormalizeResponse FromKserve(const inference::ModelInferResponse& response) {
  v1::NormalizeResponse out;
  if (response.id().rfind("id-", 0) == 0) out.set_request_id(std::stoull(response.id().substr(3)));
  if (response.outputs_size() != 1 || response.raw_output_contents_size() != 1) return out;
  const auto& tensor = response.outputs(0);
  out.mutable_output()->set_dtype(tensor.datatype() == "FP32"   ? v1::FP32
                                  : tensor.datatype() == "FP16" ? v1::FP16
                                                                : v1::BF16);
  for (int64_t dim : tensor.shape()) out.mutable_output()->add_shape(dim);
  out.mutable_output()->set_data(response.raw_output_contents(0));
  return out;
}

// Every stage counts each of the `requests` successful requests; each
// took time; together they fit in the end-to-end time.
void ExpectConsistentDurations(const inference::ModelStatistics& s, uint64_t requests) {
  const auto& i = s.inference_stats();
  EXPECT_EQ(i.success().count(), requests);
  EXPECT_EQ(i.fail().count(), 0u);
  uint64_t parts = 0;
  for (const auto* d : {&i.queue(), &i.compute_input(), &i.compute_infer(), &i.compute_output()}) {
    EXPECT_EQ(d->count(), requests);
    EXPECT_GT(d->ns(), 0u);
    parts += d->ns();
  }
  EXPECT_LE(parts, i.success().ns());
}

class KserveServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer(TestServerOptions());
    auto channel = ConnectedChannel(server_->grpc_port());
    stub_ = inference::GRPCInferenceService::NewStub(channel);
    normalizer_ = v1::Normalizer::NewStub(channel);
  }
  void TearDown() override {
    EXPECT_TRUE(QueuedBytesReturnToZero(*server_));
    server_->Stop();
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response) {
    return stub_->ModelInfer(ContextWithDeadline().get(), request, response);
  }

  std::mt19937_64 rng_{TestSeed()};
  std::unique_ptr<Server> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<v1::Normalizer::Stub> normalizer_;
};

TEST_F(KserveServiceTest, HealthMetadataAndConfigRpcs) {
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(ContextWithDeadline().get(), {}, &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(ContextWithDeadline().get(), {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ModelReadyRequest model_ready;
  model_ready.set_name("rmsnorm");
  inference::ModelReadyResponse model_ready_response;
  ASSERT_TRUE(
      stub_->ModelReady(ContextWithDeadline().get(), model_ready, &model_ready_response).ok());
  EXPECT_TRUE(model_ready_response.ready());
  model_ready.set_name("nosuch");
  EXPECT_EQ(stub_->ModelReady(ContextWithDeadline().get(), model_ready, &model_ready_response)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);

  inference::ServerMetadataResponse server_meta;
  ASSERT_TRUE(stub_->ServerMetadata(ContextWithDeadline().get(), {}, &server_meta).ok());
  EXPECT_EQ(server_meta.name(), "normsvc");
  EXPECT_FALSE(server_meta.version().empty());

  inference::ModelMetadataRequest meta_request;
  meta_request.set_name("layernorm");
  inference::ModelMetadataResponse meta;
  ASSERT_TRUE(stub_->ModelMetadata(ContextWithDeadline().get(), meta_request, &meta).ok());
  ASSERT_EQ(meta.inputs_size(), 3);
  EXPECT_EQ(meta.outputs(0).name(), "OUTPUT");
  meta_request.set_version("7");
  EXPECT_EQ(stub_->ModelMetadata(ContextWithDeadline().get(), meta_request, &meta).error_code(),
            grpc::StatusCode::NOT_FOUND);

  inference::ModelConfigRequest config_request;
  config_request.set_name("rmsnorm");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(stub_->ModelConfig(ContextWithDeadline().get(), config_request, &config).ok());
  EXPECT_EQ(config.config().name(), "rmsnorm");
  EXPECT_EQ(config.config().input_size(), 2);
}

TEST_F(KserveServiceTest, ModelInferMatchesTheOracleInEveryDtype) {
  uint64_t id = 0;
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      ForwardCase c;
      c.op = op;
      c.dtype = dtype;
      c.shape = {2, 3, 80};
      c.inline_gamma = true;
      c.inline_beta = op == NormOp::kLayerNorm;
      c.epsilon = 1e-3f;
      const ForwardRequest fr = MakeForwardRequest(rng_, c, ++id);
      const std::string model = op == NormOp::kLayerNorm ? "layernorm" : "rmsnorm";
      inference::ModelInferResponse response;
      const grpc::Status status = Infer(ToKserve(model, fr.request), &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(response.id(), "id-" + std::to_string(id));
      EXPECT_EQ(response.model_name(), model);
      EXPECT_TRUE(CheckForward(fr.request, fr.gamma, fr.beta, FromKserve(response)))
          << model << " " << DatatypeName(dtype);
    }
  }
}

TEST_F(KserveServiceTest, TypedFp32ContentsAndRegisteredSetModels) {
  ForwardCase c;
  c.shape = {5, 48};
  const ForwardRequest fr = MakeForwardRequest(rng_, c, 1);
  // Typed contents: the same values as fp32_contents.
  inference::ModelInferRequest typed;
  typed.set_model_name("layernorm");
  typed.set_id("id-1");
  auto* input = typed.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  input->add_shape(5);
  input->add_shape(48);
  const std::string& bytes = fr.request.input().data();
  for (size_t i = 0; i < bytes.size(); i += 4) {
    float v;
    std::memcpy(&v, bytes.data() + i, 4);
    input->mutable_contents()->add_fp32_contents(v);
  }
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(typed, &response).ok());
  EXPECT_TRUE(CheckForward(fr.request, {}, {}, FromKserve(response)));

  // A registered set is model layernorm.<name>; the client sends INPUT only.
  const HostTensor gamma = RandomTensor(rng_, DType::kF32, {48}, 1.0, 0.3);
  const HostTensor beta = RandomTensor(rng_, DType::kF32, {48});
  v1::RegisterParametersRequest reg;
  reg.set_name("block0");
  *reg.mutable_gamma() = ToProto(gamma);
  *reg.mutable_beta() = ToProto(beta);
  v1::RegisterParametersResponse reg_response;
  ASSERT_TRUE(
      normalizer_->RegisterParameters(ContextWithDeadline().get(), reg, &reg_response).ok());
  inference::ModelInferResponse set_response;
  ASSERT_TRUE(Infer(ToKserve("layernorm.block0", fr.request), &set_response).ok());
  EXPECT_TRUE(CheckForward(fr.request, gamma.values, beta.values, FromKserve(set_response)));

  inference::ModelMetadataRequest meta_request;
  meta_request.set_name("layernorm.block0");
  inference::ModelMetadataResponse meta;
  ASSERT_TRUE(stub_->ModelMetadata(ContextWithDeadline().get(), meta_request, &meta).ok());
  ASSERT_EQ(meta.inputs_size(), 1);
  EXPECT_EQ(meta.inputs(0).shape(1), 48);
  // RMSNorm refuses a set with beta.
  inference::ModelInferResponse refused;
  EXPECT_EQ(Infer(ToKserve("rmsnorm.block0", fr.request), &refused).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(KserveServiceTest, ErrorsAreGrpcStatusesWithClearMessages) {
  ForwardCase c;
  const ForwardRequest fr = MakeForwardRequest(rng_, c, 1);
  inference::ModelInferResponse response;
  grpc::Status status = Infer(ToKserve("softmax", fr.request), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("unknown model 'softmax'"), std::string::npos);
  inference::ModelInferRequest short_data = ToKserve("layernorm", fr.request);
  short_data.mutable_raw_input_contents(0)->resize(12);
  status = Infer(short_data, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("model 'layernorm': INPUT.", 0), 0u)
      << status.error_message();
}

TEST_F(KserveServiceTest, StreamAnswersInOrderAndStatisticsCountExactly) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  std::vector<ForwardRequest> sent;
  for (int i = 0; i < 4; ++i) {
    ForwardCase c;
    c.op = NormOp::kRmsNorm;
    c.shape = {i + 1, 32};
    sent.push_back(MakeForwardRequest(rng_, c, i));
    ASSERT_TRUE(stream->Write(ToKserve(i == 2 ? "nosuch" : "rmsnorm", sent.back().request)));
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse reply;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(stream->Read(&reply)) << i;
    EXPECT_EQ(reply.infer_response().id(), "id-" + std::to_string(i));
    if (i == 2) {
      EXPECT_NE(reply.error_message().find("unknown model"), std::string::npos);
      continue;
    }
    EXPECT_TRUE(reply.error_message().empty()) << reply.error_message();
    EXPECT_TRUE(CheckForward(sent[i].request, {}, {}, FromKserve(reply.infer_response())));
  }
  EXPECT_FALSE(stream->Read(&reply));
  ASSERT_TRUE(stream->Finish().ok());

  inference::ModelStatisticsRequest stats_request;
  stats_request.set_name("rmsnorm");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(stub_->ModelStatistics(ContextWithDeadline().get(), stats_request, &stats).ok());
  ASSERT_EQ(stats.model_stats_size(), 1);
  const auto& s = stats.model_stats(0);
  EXPECT_EQ(s.inference_count(), 1u + 2u + 4u);
  EXPECT_EQ(s.execution_count(), 3u);
  EXPECT_EQ(s.inference_stats().success().count(), 3u);
  EXPECT_EQ(s.inference_stats().fail().count(), 0u);  // the unknown model is not rmsnorm's
  // One request per launch (a stream runs one at a time): launches of 1, 2
  // and 4 rows, each charged to its one request.
  ASSERT_EQ(s.batch_stats_size(), 3);
  uint64_t batch_infer_ns = 0;
  const uint64_t sizes[] = {1, 2, 4};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.batch_stats(i).batch_size(), sizes[i]);
    EXPECT_EQ(s.batch_stats(i).compute_infer().count(), 1u);
    batch_infer_ns += s.batch_stats(i).compute_infer().ns();
  }
  EXPECT_EQ(s.inference_stats().compute_infer().ns(), batch_infer_ns);
  ExpectConsistentDurations(s, 3);
  stats_request.set_name("");  // every model: layernorm and rmsnorm
  inference::ModelStatisticsResponse all;
  ASSERT_TRUE(stub_->ModelStatistics(ContextWithDeadline().get(), stats_request, &all).ok());
  ASSERT_EQ(all.model_stats_size(), 2);
  EXPECT_EQ(all.model_stats(0).name(), "layernorm");
  EXPECT_EQ(all.model_stats(0).execution_count(), 0u);
  EXPECT_EQ(all.model_stats(1).execution_count(), 3u);
}

// A message that does not parse is answered in its place in the order, as
// INVALID_ARGUMENT, and the stream goes on (gRPC's own parsing would have
// ended the stream there, OK, with the later requests unanswered).
TEST_F(KserveServiceTest, StreamAnswersAMalformedMessageInItsPlaceAndGoesOn) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  std::vector<ForwardRequest> sent;
  for (int i = 0; i < 3; ++i) {
    ForwardCase c;
    c.op = NormOp::kRmsNorm;
    c.shape = {i + 2, 24};
    sent.push_back(MakeForwardRequest(rng_, c, i));
    inference::ModelInferRequest request = ToKserve("rmsnorm", sent.back().request);
    // proto3 strings must be UTF-8; protobuf checks it when parsing.
    if (i == 1) request.set_model_name("rmsnorm\xE9");
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse reply;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Read(&reply)) << i;
    if (i == 1) {
      EXPECT_EQ(reply.error_message(),
                "INVALID_ARGUMENT: stream message 2 is not a valid ModelInferRequest");
      continue;
    }
    EXPECT_EQ(reply.infer_response().id(), "id-" + std::to_string(i));
    EXPECT_TRUE(reply.error_message().empty()) << reply.error_message();
    EXPECT_TRUE(CheckForward(sent[i].request, {}, {}, FromKserve(reply.infer_response())));
  }
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(KserveBatchingTest, RequestsSharingALaunchCountOneExecutionOfTheirSize) {
  // A launch closes at 12 rows (the delay is far longer than the test):
  // three layernorm requests and one rmsnorm request of 3 rows each.
  ServerOptions options = TestServerOptions();
  options.max_batch_rows = 12;
  options.max_queue_delay_us = 20'000'000;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = inference::GRPCInferenceService::NewStub(ConnectedChannel(server->grpc_port()));
  std::mt19937_64 rng(TestSeed() + 77);
  std::vector<ForwardRequest> sent;
  for (int i = 0; i < 4; ++i) {
    ForwardCase c;
    c.op = i == 3 ? NormOp::kRmsNorm : NormOp::kLayerNorm;
    c.shape = {3, 48};
    sent.push_back(MakeForwardRequest(rng, c, i));
  }
  std::vector<std::thread> clients;
  std::vector<inference::ModelInferResponse> replies(4);
  std::vector<grpc::Status> statuses(4);
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      statuses[i] = stub->ModelInfer(ContextWithDeadline().get(),
                                     ToKserve(i == 3 ? "rmsnorm" : "layernorm", sent[i].request),
                                     &replies[i]);
    });
  }
  for (std::thread& client : clients) client.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    EXPECT_TRUE(CheckForward(sent[i].request, {}, {}, FromKserve(replies[i])));
  }
  inference::ModelStatisticsRequest request;
  inference::ModelStatisticsResponse all;
  ASSERT_TRUE(stub->ModelStatistics(ContextWithDeadline().get(), request, &all).ok());
  ASSERT_EQ(all.model_stats_size(), 2);
  for (int m = 0; m < 2; ++m) {
    const auto& s = all.model_stats(m);
    const uint64_t requests = m == 0 ? 3 : 1;
    EXPECT_EQ(s.name(), m == 0 ? "layernorm" : "rmsnorm");
    EXPECT_EQ(s.inference_count(), 3 * requests);
    EXPECT_EQ(s.execution_count(), 1u);
    ASSERT_EQ(s.batch_stats_size(), 1);
    EXPECT_EQ(s.batch_stats(0).batch_size(), 12u);
    EXPECT_EQ(s.batch_stats(0).compute_infer().count(), 1u);
    // Every request is charged the launch's whole run.
    EXPECT_EQ(s.inference_stats().compute_infer().ns(),
              requests * s.batch_stats(0).compute_infer().ns());
    ExpectConsistentDurations(s, requests);
  }
  EXPECT_TRUE(server->Stop());
}

TEST_F(KserveServiceTest, DrainEndsAnIdleStreamAtOnceWithUnavailable) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  ForwardCase c;
  const ForwardRequest fr = MakeForwardRequest(rng_, c, 5);
  ASSERT_TRUE(stream->Write(ToKserve("layernorm", fr.request)));
  inference::ModelStreamInferResponse reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_TRUE(CheckForward(fr.request, {}, {}, FromKserve(reply.infer_response())));
  // The stream now waits for its next request; the drain must not wait
  // for it (the drain timeout is 30 s by default).
  const absl::Time start = absl::Now();
  std::thread stopper([this] { server_->Stop(); });
  EXPECT_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  stopper.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace normsvc::server::testing
