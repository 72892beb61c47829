// The Prometheus exposition: after known traffic, every family is present
// with the right labels and exact counts, and /metrics serves them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "inference/grpc_service.grpc.pb.h"
#include "server/gpu_backend.h"
#include "server/metrics.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

using Labels = std::map<std::string, std::string>;

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) body.append(buffer, n);
    }
  }
  close(fd);
  return body;
}

// The value of the first sample of `name` whose label text contains
// `label_part`, read from a text exposition; nullopt when there is none.
std::optional<double> SampleValue(const std::string& text, const std::string& name,
                                  const std::string& label_part) {
  for (size_t at = text.find("\n" + name + "{"); at != std::string::npos;
       at = text.find("\n" + name + "{", at + 1)) {
    const size_t end = text.find('\n', at + 1);
    const std::string line = text.substr(at + 1, end - at - 1);
    if (line.find(label_part) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = TestServerOptions();
    options.metrics_address = "127.0.0.1:0";
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->grpc_port());
  }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(server_->Stop());
    }
  }
  const prometheus::Registry& registry() { return *server_->metrics().registry(); }
  double Value(const std::string& family, const Labels& labels) {
    std::optional<double> value = SeriesValue(registry(), family, labels);
    EXPECT_TRUE(value.has_value()) << family << " has no series with the labels asked for";
    return value.value_or(-1);
  }
  grpc::Status Normalize(std::mt19937_64& rng, ForwardCase c, bool break_op = false,
                         const char* parameter_set = nullptr) {
    ForwardRequest made = MakeForwardRequest(rng, c, 1);
    if (break_op) made.request.set_op(v1::NORM_OP_UNSPECIFIED);
    if (parameter_set) made.request.mutable_parameters()->set_name(parameter_set);
    v1::NormalizeResponse response;
    auto context = ContextWithDeadline();
    return stub_->Normalize(context.get(), made.request, &response);
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::Normalizer::Stub> stub_;
};

TEST_F(MetricsTest, EveryFamilyHasExactCountsAfterKnownTraffic) {
  std::mt19937_64 rng(TestSeed() + 900);
  // Requests go one at a time, so each launch holds exactly one request.
  ForwardCase ln32;
  ln32.shape = {2, 64};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Normalize(rng, ln32).ok());
  ForwardCase rms16;
  rms16.op = NormOp::kRmsNorm;
  rms16.dtype = DType::kBF16;
  rms16.shape = {3, 32};
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Normalize(rng, rms16).ok());
  ForwardCase fp16 = ln32;
  fp16.dtype = DType::kF16;
  EXPECT_EQ(Normalize(rng, fp16, /*break_op=*/true).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Normalize(rng, ln32, false, "missing").error_code(), grpc::StatusCode::NOT_FOUND);

  v1::NormalizeBackwardRequest backward;
  backward.set_op(v1::LAYER_NORM);
  *backward.mutable_input() = ToProto(RandomTensor(rng, DType::kF16, {4, 64}));
  *backward.mutable_grad_output() = ToProto(RandomTensor(rng, DType::kF16, {4, 64}));
  v1::NormalizeBackwardResponse backward_response;
  auto c1 = ContextWithDeadline();
  ASSERT_TRUE(stub_->NormalizeBackward(c1.get(), backward, &backward_response).ok());

  auto c2 = ContextWithDeadline();
  auto stream = stub_->NormalizeStream(c2.get());
  for (int i = 0; i < 4; ++i) {
    ForwardCase c;
    c.op = NormOp::kRmsNorm;
    c.shape = {1, 16};
    ASSERT_TRUE(stream->Write(MakeForwardRequest(rng, c, i).request));
    v1::NormalizeStreamResponse reply;
    ASSERT_TRUE(stream->Read(&reply));
    ASSERT_TRUE(reply.has_response());
  }
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());

  v1::RegisterParametersRequest reg;
  reg.set_name("set");
  *reg.mutable_gamma() = ToProto(RandomTensor(rng, DType::kF32, {8}));
  v1::RegisterParametersResponse reg_response;
  auto c3 = ContextWithDeadline();
  ASSERT_TRUE(stub_->RegisterParameters(c3.get(), reg, &reg_response).ok());
  reg.set_name("bad name");
  auto c4 = ContextWithDeadline();
  EXPECT_FALSE(stub_->RegisterParameters(c4.get(), reg, &reg_response).ok());
  v1::ListParametersResponse list;
  auto c5 = ContextWithDeadline();
  ASSERT_TRUE(stub_->ListParameters(c5.get(), {}, &list).ok());
  v1::GetServerInfoResponse info;
  auto c6 = ContextWithDeadline();
  ASSERT_TRUE(stub_->GetServerInfo(c6.get(), {}, &info).ok());
  v1::DeleteParametersRequest del;
  del.set_name("set");
  v1::DeleteParametersResponse del_response;
  auto c7 = ContextWithDeadline();
  ASSERT_TRUE(stub_->DeleteParameters(c7.get(), del, &del_response).ok());

  const std::string requests = "normsvc_requests_total";
  auto req = [&](const char* method, const char* op, const char* dtype, const char* code) {
    return Value(requests, {{"method", method}, {"op", op}, {"dtype", dtype}, {"code", code}});
  };
  EXPECT_EQ(req("Normalize", "layer_norm", "fp32", "OK"), 3);
  EXPECT_EQ(req("Normalize", "rms_norm", "bf16", "OK"), 2);
  EXPECT_EQ(req("Normalize", "none", "fp16", "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(req("Normalize", "layer_norm", "fp32", "NOT_FOUND"), 1);
  EXPECT_EQ(req("Normalize", "layer_norm", "fp16", "INTERNAL"), 0);  // resolved at start-up
  EXPECT_EQ(req("NormalizeBackward", "layer_norm", "fp16", "OK"), 1);
  EXPECT_EQ(req("NormalizeStream", "rms_norm", "fp32", "OK"), 4);
  EXPECT_EQ(req("RegisterParameters", "none", "none", "OK"), 1);
  EXPECT_EQ(req("RegisterParameters", "none", "none", "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(req("ListParameters", "none", "none", "OK"), 1);
  EXPECT_EQ(req("GetServerInfo", "none", "none", "OK"), 1);
  EXPECT_EQ(req("DeleteParameters", "none", "none", "OK"), 1);
  // Methods without tensors have no op/dtype label values other than none.
  EXPECT_FALSE(SeriesValue(
      registry(), requests,
      {{"method", "GetServerInfo"}, {"op", "layer_norm"}, {"dtype", "fp32"}, {"code", "OK"}}));

  auto rows = [&](const char* method, const char* op, const char* dtype) {
    return Value("normsvc_request_rows_total", {{"method", method}, {"op", op}, {"dtype", dtype}});
  };
  EXPECT_EQ(rows("Normalize", "layer_norm", "fp32"), 6);
  EXPECT_EQ(rows("Normalize", "rms_norm", "bf16"), 6);
  EXPECT_EQ(rows("NormalizeStream", "rms_norm", "fp32"), 4);
  EXPECT_EQ(rows("NormalizeBackward", "layer_norm", "fp16"), 4);

  auto duration = [&](const char* method) {
    return Value("normsvc_request_duration_seconds", {{"method", method}});
  };
  EXPECT_EQ(duration("Normalize"), 7);
  EXPECT_EQ(duration("NormalizeStream"), 4);
  EXPECT_EQ(duration("NormalizeBackward"), 1);
  EXPECT_EQ(duration("RegisterParameters"), 2);
  EXPECT_EQ(duration("ListParameters"), 1);
  EXPECT_EQ(duration("GetServerInfo"), 1);
  EXPECT_EQ(duration("DeleteParameters"), 1);

  // Ten launches of one request each: 3 + 2 forward, 1 backward, 4 streamed.
  const Labels cpu = {{"device", "cpu"}};
  EXPECT_EQ(Value("normsvc_queue_wait_seconds", cpu), 10);
  EXPECT_EQ(Value("normsvc_batch_requests", cpu), 10);
  EXPECT_EQ(HistogramSum(registry(), "normsvc_batch_requests", cpu), 10);
  EXPECT_EQ(Value("normsvc_batch_rows", cpu), 10);
  EXPECT_EQ(HistogramSum(registry(), "normsvc_batch_rows", cpu), 6 + 6 + 4 + 4);
  EXPECT_EQ(Value("normsvc_batch_kernel_seconds", cpu), 10);
  EXPECT_EQ(Value("normsvc_batch_h2d_seconds", cpu), 0);  // the CPU executor has no copies
  EXPECT_EQ(Value("normsvc_batch_d2h_seconds", cpu), 0);
  EXPECT_EQ(Value("normsvc_kernel_bandwidth_bytes_per_second", cpu), 10);
  // Bytes read + written: 3 x (512 + 512), 2 x (192 + 192), backward
  // (512 + 512) + (512 + 256 + 256), 4 x (64 + 64).
  EXPECT_EQ(Value("normsvc_processed_bytes_total", cpu), 3072 + 768 + 2048 + 512);
  EXPECT_EQ(Value("normsvc_pending_requests", cpu), 0);
  EXPECT_EQ(Value("normsvc_pending_rows", cpu), 0);
  EXPECT_EQ(Value("normsvc_batches_in_flight", cpu), 0);
  EXPECT_GT(Value("normsvc_device_copy_bandwidth_bytes_per_second", cpu), 0);
  for (const char* reason : {"queue_full", "deadline_exceeded", "cancelled"}) {
    EXPECT_EQ(Value("normsvc_rejected_requests_total", {{"reason", reason}}), 0) << reason;
  }
  const v1::GetServerInfoResponse& server_info = server_->info();
  EXPECT_EQ(Value("normsvc_build_info", {{"version", server_info.version()},
                                         {"git_commit", server_info.git_commit()},
                                         {"cuda_version", CudaRuntimeVersion()},
                                         {"backend", "cpu"}}),
            1);
}

// A ModelInfer request of `model` with INPUT only (raw bytes).
inference::ModelInferRequest KserveRequest(const std::string& model, const v1::Tensor& input) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* tensor = request.add_inputs();
  tensor->set_name("INPUT");
  tensor->set_datatype(input.dtype() == v1::FP32   ? "FP32"
                       : input.dtype() == v1::FP16 ? "FP16"
                                                   : "BF16");
  for (int64_t dim : input.shape()) tensor->add_shape(dim);
  request.add_raw_input_contents(input.data());
  return request;
}

TEST_F(MetricsTest, KserveCallsCountUnderTheirRpcNamesWithOpDtypeAndCode) {
  std::mt19937_64 rng(TestSeed() + 901);
  auto kserve = inference::GRPCInferenceService::NewStub(ConnectedChannel(server_->grpc_port()));
  auto infer = [&](const inference::ModelInferRequest& request) {
    inference::ModelInferResponse response;
    return kserve->ModelInfer(ContextWithDeadline().get(), request, &response).error_code();
  };
  const v1::Tensor ln = ToProto(RandomTensor(rng, DType::kF32, {3, 64}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(infer(KserveRequest("layernorm", ln)), grpc::OK);
  EXPECT_EQ(infer(KserveRequest("rmsnorm", ToProto(RandomTensor(rng, DType::kBF16, {5, 32})))),
            grpc::OK);
  EXPECT_EQ(infer(KserveRequest("softmax", ln)), grpc::NOT_FOUND);
  inference::ModelInferRequest bad = KserveRequest("layernorm", ln);
  bad.mutable_inputs(0)->set_shape(0, 4);  // 4 x 64 floats promised, 3 x 64 sent
  EXPECT_EQ(infer(bad), grpc::INVALID_ARGUMENT);

  grpc::ClientContext stream_context;
  auto stream = kserve->ModelStreamInfer(&stream_context);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(stream->Write(
        KserveRequest("rmsnorm", ToProto(RandomTensor(rng, DType::kF16, {2 + i, 16})))));
    inference::ModelStreamInferResponse reply;
    ASSERT_TRUE(stream->Read(&reply));
    EXPECT_TRUE(reply.error_message().empty()) << reply.error_message();
  }
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());

  inference::ServerLiveResponse live;
  ASSERT_TRUE(kserve->ServerLive(ContextWithDeadline().get(), {}, &live).ok());
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(kserve->ServerReady(ContextWithDeadline().get(), {}, &ready).ok());
  inference::ModelReadyRequest model_ready;
  inference::ModelReadyResponse model_ready_response;
  for (const char* name : {"layernorm", "rmsnorm.none", "rmsnorm"}) {
    model_ready.set_name(name);
    kserve->ModelReady(ContextWithDeadline().get(), model_ready, &model_ready_response);
  }
  inference::ServerMetadataResponse server_metadata;
  ASSERT_TRUE(kserve->ServerMetadata(ContextWithDeadline().get(), {}, &server_metadata).ok());
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("layernorm");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(kserve->ModelMetadata(ContextWithDeadline().get(), metadata_request, &metadata).ok());
  inference::ModelConfigRequest config_request;
  config_request.set_name("rmsnorm");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(kserve->ModelConfig(ContextWithDeadline().get(), config_request, &config).ok());
  inference::ModelStatisticsResponse statistics;
  ASSERT_TRUE(kserve->ModelStatistics(ContextWithDeadline().get(), {}, &statistics).ok());

  auto req = [&](const char* method, const char* op, const char* dtype, const char* code) {
    return Value("normsvc_requests_total",
                 {{"method", method}, {"op", op}, {"dtype", dtype}, {"code", code}});
  };
  EXPECT_EQ(req("ModelInfer", "layer_norm", "fp32", "OK"), 3);
  EXPECT_EQ(req("ModelInfer", "rms_norm", "bf16", "OK"), 1);
  EXPECT_EQ(req("ModelInfer", "none", "fp32", "NOT_FOUND"), 1);  // no such model: no op
  EXPECT_EQ(req("ModelInfer", "layer_norm", "fp32", "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(req("ModelStreamInfer", "rms_norm", "fp16", "OK"), 2);  // one per message
  EXPECT_EQ(req("ServerLive", "none", "none", "OK"), 1);
  EXPECT_EQ(req("ServerReady", "none", "none", "OK"), 1);
  EXPECT_EQ(req("ModelReady", "none", "none", "OK"), 2);
  EXPECT_EQ(req("ModelReady", "none", "none", "NOT_FOUND"), 1);
  EXPECT_EQ(req("ServerMetadata", "none", "none", "OK"), 1);
  EXPECT_EQ(req("ModelMetadata", "none", "none", "OK"), 1);
  EXPECT_EQ(req("ModelConfig", "none", "none", "OK"), 1);
  EXPECT_EQ(req("ModelStatistics", "none", "none", "OK"), 1);
  EXPECT_FALSE(SeriesValue(
      registry(), "normsvc_requests_total",
      {{"method", "ModelConfig"}, {"op", "layer_norm"}, {"dtype", "fp32"}, {"code", "OK"}}));
  // normsvc.v1 saw none of it.
  EXPECT_EQ(req("Normalize", "layer_norm", "fp32", "OK"), 0);

  auto rows = [&](const char* method, const char* op, const char* dtype) {
    return Value("normsvc_request_rows_total", {{"method", method}, {"op", op}, {"dtype", dtype}});
  };
  EXPECT_EQ(rows("ModelInfer", "layer_norm", "fp32"), 9);  // failed requests add no rows
  EXPECT_EQ(rows("ModelInfer", "rms_norm", "bf16"), 5);
  EXPECT_EQ(rows("ModelStreamInfer", "rms_norm", "fp16"), 2 + 3);

  auto duration = [&](const char* method) {
    return Value("normsvc_request_duration_seconds", {{"method", method}});
  };
  EXPECT_EQ(duration("ModelInfer"), 6);
  EXPECT_EQ(duration("ModelStreamInfer"), 2);
  EXPECT_EQ(duration("ModelReady"), 3);
  for (const char* method : {"ServerLive", "ServerReady", "ServerMetadata", "ModelMetadata",
                             "ModelConfig", "ModelStatistics"}) {
    EXPECT_EQ(duration(method), 1) << method;
  }
  EXPECT_GT(HistogramSum(registry(), "normsvc_request_duration_seconds", {{"method", "ModelInfer"}})
                .value_or(0),
            0);
  // Six launches ran (four unary requests, two streamed); the two failures
  // never reached the batcher.
  EXPECT_EQ(Value("normsvc_batch_requests", {{"device", "cpu"}}), 6);
}

TEST_F(MetricsTest, MetricsEndpointServesTheTextExposition) {
  ASSERT_GT(server_->metrics_port(), 0);
  const std::string text = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_NE(text.find("200 OK"), std::string::npos) << text.substr(0, 200);
  for (const char* family : {"normsvc_requests_total counter",
                             "normsvc_request_rows_total counter",
                             "normsvc_request_duration_seconds histogram",
                             "normsvc_queue_wait_seconds histogram",
                             "normsvc_batch_h2d_seconds histogram",
                             "normsvc_batch_kernel_seconds histogram",
                             "normsvc_batch_d2h_seconds histogram",
                             "normsvc_batch_rows histogram",
                             "normsvc_batch_requests histogram",
                             "normsvc_pending_requests gauge",
                             "normsvc_pending_rows gauge",
                             "normsvc_batches_in_flight gauge",
                             "normsvc_processed_bytes_total counter",
                             "normsvc_kernel_bandwidth_bytes_per_second histogram",
                             "normsvc_device_copy_bandwidth_bytes_per_second gauge",
                             "normsvc_rejected_requests_total counter",
                             "normsvc_build_info gauge",
                             "process_cpu_seconds_total counter",
                             "process_resident_memory_bytes gauge",
                             "process_open_fds gauge",
                             "normsvc_heap_allocated_bytes gauge"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family), std::string::npos) << family;
  }
  // Time histograms: 21 exponential buckets from 10 us (+Inf makes 22).
  const std::string bucket = "normsvc_queue_wait_seconds_bucket{device=\"cpu\",le=";
  int buckets = 0;
  for (size_t at = text.find(bucket); at != std::string::npos; at = text.find(bucket, at + 1)) {
    ++buckets;
  }
  EXPECT_EQ(buckets, 22);
  // No GPU here: no NVML families.
  EXPECT_EQ(text.find("nv_gpu_utilization"), std::string::npos);
}

// On a GPU: the CUDA executor's per-device series (stage timings, kernel
// bandwidth from CUDA events, the measured copy bandwidth) and the NVML
// gauges under Triton's names.
TEST(GpuMetricsTest, CudaDeviceSeriesAndNvmlGauges) {
  if (VisibleGpuCount() == 0) {
    GTEST_SKIP() << (GpuBackendCompiled() ? "no GPU visible" : "this build has no CUDA backend")
                 << ": the CUDA executor's metrics and NVML need one";
  }
  ServerOptions options = TestServerOptions();
  options.backend = Backend::kCuda;
  options.metrics_address = "127.0.0.1:0";
  options.timed_batch_interval = 2;  // batches 0, 2 and 4 of 5 have stage timings
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::Normalizer::Stub> stub = Connect(server->grpc_port());
  std::mt19937_64 rng(TestSeed() + 901);
  ForwardCase c;
  c.shape = {4, 1024};
  constexpr int kRequests = 5;
  for (int i = 0; i < kRequests; ++i) {  // one at a time: one launch each
    v1::NormalizeResponse response;
    auto context = ContextWithDeadline();
    ASSERT_TRUE(
        stub->Normalize(context.get(), MakeForwardRequest(rng, c, i).request, &response).ok());
  }
  const std::string text = HttpGet(server->metrics_port(), "/metrics");
  const std::string cuda0 = "device=\"cuda:0\"";
  EXPECT_EQ(SampleValue(text, "normsvc_batch_rows_count", cuda0), kRequests);
  EXPECT_EQ(SampleValue(text, "normsvc_batch_kernel_seconds_count", cuda0), 3);
  EXPECT_EQ(SampleValue(text, "normsvc_batch_h2d_seconds_count", cuda0), 3);
  EXPECT_EQ(SampleValue(text, "normsvc_batch_d2h_seconds_count", cuda0), 3);
  EXPECT_EQ(SampleValue(text, "normsvc_kernel_bandwidth_bytes_per_second_count", cuda0), 3);
  EXPECT_GT(SampleValue(text, "normsvc_kernel_bandwidth_bytes_per_second_sum", cuda0).value_or(0),
            0);
  // A device-to-device copy on any current GPU moves well over 100 GB/s.
  EXPECT_GT(SampleValue(text, "normsvc_device_copy_bandwidth_bytes_per_second", cuda0).value_or(0),
            1e11);
  const std::optional<double> total = SampleValue(text, "nv_gpu_memory_total_bytes", "gpu_uuid=");
  const std::optional<double> used = SampleValue(text, "nv_gpu_memory_used_bytes", "gpu_uuid=");
  const std::optional<double> utilization = SampleValue(text, "nv_gpu_utilization", "gpu_uuid=");
  ASSERT_TRUE(total && used && utilization) << "no NVML gauges in:\n" << text.substr(0, 2000);
  EXPECT_GT(*total, 1e9);
  EXPECT_GT(*used, 0);
  EXPECT_LE(*used, *total);
  EXPECT_GE(*utilization, 0.0);
  EXPECT_LE(*utilization, 1.0);
  EXPECT_TRUE(server->Stop());
}

TEST(TimeBucketsTest, ExponentialFromTenMicrosecondsToTenSeconds) {
  const std::vector<double> buckets = TimeBuckets();
  ASSERT_EQ(buckets.size(), 21u);
  EXPECT_DOUBLE_EQ(buckets.front(), 1e-5);
  EXPECT_DOUBLE_EQ(buckets.back(), 1e-5 * (1 << 20));
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_DOUBLE_EQ(buckets[i], 2 * buckets[i - 1]);
}

}  // namespace
}  // namespace normsvc::server::testing
