// The whole server on loopback: many concurrent clients, mixed ops, dtypes
// and hidden sizes, unary and streaming, registered and inline parameters.
// Every result is checked against the double-precision oracle. Runs on the
// CPU backend everywhere and on the CUDA backend where a GPU is visible.
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "server/executor_pool.h"
#include "server/gpu_backend.h"
#include "server/options.h"
#include "server/usable_cpus.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

constexpr int64_t kHiddenSizes[] = {1, 3, 64, 100, 768, 1024, 4096};

// Registered sets, for every H: "g<H>" (FP32 gamma), "gb<H>" (and beta, LayerNorm).
struct RegisteredSets {
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> values;
};

ForwardCase RandomCase(std::mt19937_64& rng) {
  auto pick = [&rng](int n) { return static_cast<int>(rng() % n); };
  ForwardCase c;
  c.op = pick(2) ? NormOp::kLayerNorm : NormOp::kRmsNorm;
  c.dtype = static_cast<DType>(pick(3));
  const int64_t hidden = kHiddenSizes[pick(std::size(kHiddenSizes))];
  const int64_t rows = 1 + pick(6);
  switch (pick(3)) {
    case 0:
      c.shape = {rows, hidden};
      break;
    case 1:
      c.shape = {1, rows, hidden};
      break;
    default:
      c.shape = {hidden};
  }
  if (pick(4) == 0) c.output_dtype = static_cast<DType>(pick(3));
  c.residual = pick(5) < 2;
  c.return_residual_sum = c.residual && pick(2);
  c.return_statistics = pick(5) < 2;
  c.inline_gamma = pick(2);
  c.inline_beta = c.op == NormOp::kLayerNorm && pick(5) < 2;
  if (c.inline_gamma || c.inline_beta) c.param_dtype = pick(2) ? DType::kF32 : c.dtype;
  const float epsilons[] = {0.0f, 1e-6f, 1e-3f};
  c.epsilon = epsilons[pick(3)];
  return c;
}

class IntegrationTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kCuda && VisibleGpuCount() == 0) {
      GTEST_SKIP() << (GpuBackendCompiled() ? "no GPU visible" : "this build has no CUDA backend")
                   << ": the CUDA integration suite runs on the GPU machine";
    }
    ServerOptions options = TestServerOptions();
    options.backend = GetParam();
    options.max_batch_rows = 64;             // larger requests run alone
    options.staging_buffer_bytes = 2 << 20;  // larger requests run in chunks (GPU)
    options.max_hidden_size = 65536;         // one row of the largest H fits the 2 MiB
    options.max_queue_delay_us = 200;        // let batches form under load
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->grpc_port());
  }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(QueuedBytesReturnToZero(*server_));
      EXPECT_TRUE(server_->Stop());
    }
  }

  void Register(std::mt19937_64& rng, RegisteredSets* sets) {
    for (int64_t hidden : kHiddenSizes) {
      for (bool with_beta : {false, true}) {
        v1::RegisterParametersRequest request;
        request.set_name((with_beta ? "gb" : "g") + std::to_string(hidden));
        HostTensor gamma = RandomTensor(rng, DType::kF32, {hidden}, 1.0, 0.25);
        *request.mutable_gamma() = ToProto(gamma);
        std::vector<double> beta_values;
        if (with_beta) {
          HostTensor beta = RandomTensor(rng, DType::kF32, {hidden}, 0.0, 0.5);
          *request.mutable_beta() = ToProto(beta);
          beta_values = beta.values;
        }
        v1::RegisterParametersResponse response;
        auto context = ContextWithDeadline();
        ASSERT_TRUE(stub_->RegisterParameters(context.get(), request, &response).ok());
        sets->values[request.name()] = {gamma.values, beta_values};
      }
    }
  }

  // A random forward request; a quarter use a registered set.
  ForwardRequest RandomRequest(std::mt19937_64& rng, const RegisteredSets& sets, uint64_t id) {
    ForwardCase c = RandomCase(rng);
    const bool registered = rng() % 4 == 0;
    if (registered) c.inline_gamma = c.inline_beta = false;
    ForwardRequest made = MakeForwardRequest(rng, c, id);
    if (registered) {
      const bool beta = c.op == NormOp::kLayerNorm && rng() % 2;
      const std::string name = (beta ? "gb" : "g") + std::to_string(c.shape.back());
      made.request.mutable_parameters()->set_name(name);
      made.gamma = sets.values.at(name).first;
      made.beta = sets.values.at(name).second;
    }
    return made;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::Normalizer::Stub> stub_;
};

TEST_P(IntegrationTest, ConcurrentUnaryClientsWithMixedRequests) {
  std::mt19937_64 rng(TestSeed());
  RegisteredSets sets;
  Register(rng, &sets);
  constexpr int kClients = 8;
  constexpr int kRequestsPerClient = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 local(TestSeed() + 1000 + c);
      auto stub = Connect(server_->grpc_port());  // one connection per client
      for (int i = 0; i < kRequestsPerClient; ++i) {
        ForwardRequest made = RandomRequest(local, sets, c * 1000 + i);
        v1::NormalizeResponse response;
        auto context = ContextWithDeadline();
        const grpc::Status status = stub->Normalize(context.get(), made.request, &response);
        ASSERT_TRUE(status.ok()) << status.error_message() << " for "
                                 << made.request.ShortDebugString().substr(0, 300);
        ASSERT_TRUE(CheckForward(made.request, made.gamma, made.beta, response))
            << made.request.ShortDebugString().substr(0, 300);
        ok.fetch_add(1);
      }
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(ok.load(), kClients * kRequestsPerClient);
}

TEST_P(IntegrationTest, StreamsAnswerEveryRequestWithItsIdAndContinueAfterErrors) {
  std::mt19937_64 rng(TestSeed() + 1);
  RegisteredSets sets;
  Register(rng, &sets);
  constexpr int kStreams = 3;
  constexpr int kRequests = 60;
  std::vector<std::thread> streams;
  for (int s = 0; s < kStreams; ++s) {
    streams.emplace_back([&, s] {
      std::mt19937_64 local(TestSeed() + 2000 + s);
      std::map<uint64_t, ForwardRequest> sent;
      for (int i = 0; i < kRequests; ++i) sent[i] = RandomRequest(local, sets, i);
      sent[kRequests / 2].request.set_op(v1::NORM_OP_UNSPECIFIED);  // one bad request
      auto stub = Connect(server_->grpc_port());
      auto context = ContextWithDeadline(60);
      auto stream = stub->NormalizeStream(context.get());
      std::thread writer([&] {
        for (const auto& [id, made] : sent) {
          if (!stream->Write(made.request)) break;
        }
        stream->WritesDone();
      });
      std::set<uint64_t> answered;
      v1::NormalizeStreamResponse reply;
      while (stream->Read(&reply)) {
        const uint64_t id = reply.request_id();
        ASSERT_TRUE(sent.count(id)) << id;
        EXPECT_TRUE(answered.insert(id).second) << "answered twice: " << id;
        const ForwardRequest& made = sent[id];
        if (id == kRequests / 2) {
          ASSERT_TRUE(reply.has_error());
          EXPECT_EQ(reply.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
          EXPECT_NE(reply.error().message().find("op:"), std::string::npos);
          continue;
        }
        ASSERT_TRUE(reply.has_response()) << reply.error().message();
        EXPECT_TRUE(CheckForward(made.request, made.gamma, made.beta, reply.response()));
      }
      writer.join();
      const grpc::Status status = stream->Finish();
      EXPECT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(answered.size(), sent.size());
    });
  }
  for (auto& stream : streams) stream.join();
}

TEST_P(IntegrationTest, BackwardMatchesTheOracleWithSavedOrRecomputedStatistics) {
  std::mt19937_64 rng(TestSeed() + 2);
  const std::vector<std::vector<int64_t>> shapes = {{3, 64}, {2, 5, 1000}, {16, 4096}, {200, 4096}};
  uint64_t id = 0;
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (const auto& shape : shapes) {
        for (int variant = 0; variant < 3; ++variant) {  // no gamma / inline / saved statistics
          SCOPED_TRACE(::testing::Message()
                       << kernels::NormOpName(op) << " " << kernels::DTypeName(dtype)
                       << " H=" << shape.back() << " variant " << variant);
          v1::NormalizeBackwardRequest request;
          request.set_request_id(++id);
          request.set_op(op == NormOp::kLayerNorm ? v1::LAYER_NORM : v1::RMS_NORM);
          *request.mutable_input() = ToProto(RandomTensor(rng, dtype, shape));
          *request.mutable_grad_output() = ToProto(RandomTensor(rng, dtype, shape, 0.0, 1.0));
          std::vector<double> gamma;
          if (variant >= 1) {
            HostTensor g = RandomTensor(rng, DType::kF32, {shape.back()}, 1.0, 0.25);
            gamma = g.values;
            *request.mutable_parameters()->mutable_inline_()->mutable_gamma() = ToProto(g);
          }
          if (variant == 2) {  // statistics from the server's own forward pass
            v1::NormalizeRequest forward;
            forward.set_op(request.op());
            *forward.mutable_input() = request.input();
            forward.set_return_statistics(true);
            v1::NormalizeResponse saved;
            auto context = ContextWithDeadline();
            ASSERT_TRUE(stub_->Normalize(context.get(), forward, &saved).ok());
            if (op == NormOp::kLayerNorm) *request.mutable_mean() = saved.mean();
            *request.mutable_rstd() = saved.rstd();
          }
          v1::NormalizeBackwardResponse response;
          auto context = ContextWithDeadline();
          const grpc::Status status = stub_->NormalizeBackward(context.get(), request, &response);
          ASSERT_TRUE(status.ok()) << status.error_message();
          EXPECT_EQ(response.request_id(), id);
          EXPECT_TRUE(CheckBackward(request, gamma, response));
        }
      }
    }
  }
}

TEST_P(IntegrationTest, RegisteredParametersCanBeListedReplacedAndDeleted) {
  std::mt19937_64 rng(TestSeed() + 3);
  HostTensor gamma = RandomTensor(rng, DType::kBF16, {256}, 1.0, 0.25);
  HostTensor beta = RandomTensor(rng, DType::kBF16, {256}, 0.0, 0.5);
  v1::RegisterParametersRequest reg;
  reg.set_name("layer.0-ln_1");
  *reg.mutable_gamma() = ToProto(gamma);
  *reg.mutable_beta() = ToProto(beta);
  v1::RegisterParametersResponse registered;
  auto c1 = ContextWithDeadline();
  ASSERT_TRUE(stub_->RegisterParameters(c1.get(), reg, &registered).ok());
  EXPECT_EQ(registered.info().hidden_size(), 256);
  EXPECT_EQ(registered.info().dtype(), v1::BF16);
  EXPECT_TRUE(registered.info().has_gamma() && registered.info().has_beta());
  EXPECT_EQ(registered.info().bytes(), 2 * 256 * 2);

  auto c2 = ContextWithDeadline();
  v1::RegisterParametersResponse again;
  EXPECT_EQ(stub_->RegisterParameters(c2.get(), reg, &again).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);

  v1::ListParametersResponse list;
  auto c3 = ContextWithDeadline();
  ASSERT_TRUE(stub_->ListParameters(c3.get(), {}, &list).ok());
  ASSERT_EQ(list.parameter_sets_size(), 1);
  EXPECT_EQ(list.parameter_sets(0).name(), "layer.0-ln_1");

  ForwardCase c;
  c.dtype = DType::kBF16;
  c.shape = {5, 256};
  ForwardRequest made = MakeForwardRequest(rng, c, 7);
  made.request.mutable_parameters()->set_name("layer.0-ln_1");
  v1::NormalizeResponse response;
  auto c4 = ContextWithDeadline();
  ASSERT_TRUE(stub_->Normalize(c4.get(), made.request, &response).ok());
  EXPECT_TRUE(CheckForward(made.request, gamma.values, beta.values, response));

  // Replace with new values (gamma only): later requests see them.
  HostTensor gamma2 = RandomTensor(rng, DType::kF32, {256}, -1.0, 0.25);
  reg.clear_beta();
  *reg.mutable_gamma() = ToProto(gamma2);
  reg.set_replace(true);
  auto c5 = ContextWithDeadline();
  ASSERT_TRUE(stub_->RegisterParameters(c5.get(), reg, &registered).ok());
  auto c6 = ContextWithDeadline();
  ASSERT_TRUE(stub_->Normalize(c6.get(), made.request, &response).ok());
  EXPECT_TRUE(CheckForward(made.request, gamma2.values, {}, response));

  v1::DeleteParametersRequest del;
  del.set_name("layer.0-ln_1");
  v1::DeleteParametersResponse deleted;
  auto c7 = ContextWithDeadline();
  ASSERT_TRUE(stub_->DeleteParameters(c7.get(), del, &deleted).ok());
  auto c8 = ContextWithDeadline();
  const grpc::Status missing = stub_->Normalize(c8.get(), made.request, &response);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  auto c9 = ContextWithDeadline();
  EXPECT_EQ(stub_->DeleteParameters(c9.get(), del, &deleted).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_P(IntegrationTest, RequestsLargerThanABatchAndEmptyRequestsAreServed) {
  std::mt19937_64 rng(TestSeed() + 4);
  // 300 rows > max_batch_rows (64); 300 x 4096 fp32 = 4.7 MiB > the 2 MiB
  // staging buffer, so on the GPU it runs in row chunks.
  ForwardCase big;
  big.shape = {300, 4096};
  big.residual = true;
  big.return_residual_sum = true;
  big.return_statistics = true;
  big.inline_gamma = big.inline_beta = true;
  ForwardRequest made = MakeForwardRequest(rng, big, 1);
  std::thread small([&] {
    auto stub = Connect(server_->grpc_port());
    for (int i = 0; i < 20; ++i) {
      ForwardCase c;
      c.shape = {2, 64};
      ForwardRequest s = MakeForwardRequest(rng, c, 100 + i);
      v1::NormalizeResponse response;
      auto context = ContextWithDeadline();
      ASSERT_TRUE(stub->Normalize(context.get(), s.request, &response).ok());
      EXPECT_TRUE(CheckForward(s.request, s.gamma, s.beta, response));
    }
  });
  v1::NormalizeResponse response;
  auto context = ContextWithDeadline();
  ASSERT_TRUE(stub_->Normalize(context.get(), made.request, &response).ok());
  EXPECT_TRUE(CheckForward(made.request, made.gamma, made.beta, response));
  small.join();

  ForwardCase empty;
  empty.shape = {0, 3, 64};
  ForwardRequest none = MakeForwardRequest(rng, empty, 2);
  auto c2 = ContextWithDeadline();
  ASSERT_TRUE(stub_->Normalize(c2.get(), none.request, &response).ok());
  EXPECT_EQ(response.output().data().size(), 0u);
  EXPECT_EQ(response.output().shape_size(), 3);
}

// Normalize's replies are encoded by the server itself (wire_response.h): a
// client must receive the bytes protobuf would write for the same reply, for
// every result tensor, request ids 0 and the largest, and an empty request;
// and the same over NormalizeStream, whose replies wrap that encoding.
TEST_P(IntegrationTest, NormalizeRepliesAreTheBytesProtobufWouldWrite) {
  std::mt19937_64 rng(TestSeed() + 6);
  ForwardCase everything;  // residual_sum, mean and rstd, inline gamma and beta
  everything.shape = {3, 5, 300};
  everything.dtype = DType::kBF16;
  everything.output_dtype = DType::kF32;
  everything.residual = everything.return_residual_sum = everything.return_statistics = true;
  everything.inline_gamma = everything.inline_beta = true;
  ForwardCase rms;  // rstd without mean
  rms.op = NormOp::kRmsNorm;
  rms.dtype = DType::kF16;
  rms.shape = {7, 1024};
  rms.return_statistics = true;
  rms.inline_gamma = true;
  ForwardCase empty;
  empty.shape = {2, 0, 64};
  empty.return_statistics = true;
  const struct {
    ForwardCase c;
    uint64_t id;
  } cases[] = {{everything, ~uint64_t{0}}, {rms, 0}, {empty, 12345}};
  std::vector<ForwardRequest> sent;
  for (const auto& [c, id] : cases) {
    SCOPED_TRACE(::testing::Message() << "shape[0] " << c.shape[0] << ", id " << id);
    const ForwardRequest& made = sent.emplace_back(MakeForwardRequest(rng, c, id));
    std::string reply_bytes;
    const grpc::Status status =
        RawUnaryCall(server_->grpc_port(), "/normsvc.v1.Normalizer/Normalize",
                     made.request.SerializeAsString(), &reply_bytes);
    ASSERT_TRUE(status.ok()) << status.error_message();
    v1::NormalizeResponse response;
    ASSERT_TRUE(response.ParseFromString(reply_bytes));
    EXPECT_TRUE(reply_bytes == response.SerializeAsString());
    EXPECT_EQ(response.request_id(), id);
    EXPECT_TRUE(CheckForward(made.request, made.gamma, made.beta, response));
    EXPECT_EQ(response.output().shape_size(), static_cast<int>(c.shape.size()));
    EXPECT_EQ(response.has_mean(), c.op == NormOp::kLayerNorm);
    EXPECT_TRUE(response.has_rstd());
  }
  // Over NormalizeStream (WrapStreamResponse), one request at a time.
  auto context = ContextWithDeadline();
  auto stream = stub_->NormalizeStream(context.get());
  for (const ForwardRequest& made : sent) {
    SCOPED_TRACE(::testing::Message() << "stream, id " << made.request.request_id());
    ASSERT_TRUE(stream->Write(made.request));
    v1::NormalizeStreamResponse reply;
    ASSERT_TRUE(stream->Read(&reply));
    EXPECT_EQ(reply.request_id(), made.request.request_id());
    ASSERT_TRUE(reply.has_response()) << reply.error().message();
    EXPECT_EQ(reply.response().request_id(), made.request.request_id());
    EXPECT_TRUE(CheckForward(made.request, made.gamma, made.beta, reply.response()));
    EXPECT_EQ(reply.response().output().shape_size(), made.request.input().shape_size());
    EXPECT_TRUE(reply.response().has_rstd());
  }
  ASSERT_TRUE(stream->WritesDone());
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// Normalize parses the received bytes itself: a request the client sent
// gzip- or deflate-compressed reaches it decompressed. The values are random
// but drawn from four, so the messages compress (gRPC sends a message
// uncompressed when compressing would not shrink it).
TEST_P(IntegrationTest, CompressedRequestsAreServed) {
  std::mt19937_64 rng(TestSeed() + 7);
  const float values[] = {-1.5f, -0.5f, 0.25f, 2.0f};
  for (const grpc_compression_algorithm algorithm : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    SCOPED_TRACE(::testing::Message() << "algorithm " << static_cast<int>(algorithm));
    v1::NormalizeRequest request;
    request.set_request_id(rng() | 1);
    request.set_op(v1::LAYER_NORM);
    v1::Tensor* input = request.mutable_input();
    input->set_dtype(v1::FP32);
    input->add_shape(8);
    input->add_shape(4096);
    std::string data(8 * 4096 * sizeof(float), '\0');
    for (std::size_t i = 0; i < data.size(); i += sizeof(float)) {
      std::memcpy(&data[i], &values[rng() % 4], sizeof(float));
    }
    input->set_data(data);
    v1::NormalizeResponse response;
    response.mutable_output()->set_data(std::string(data.size(), '\x7f'));  // poison
    auto context = ContextWithDeadline();
    context->set_compression_algorithm(algorithm);
    const grpc::Status status = stub_->Normalize(context.get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.request_id(), request.request_id());
    EXPECT_TRUE(CheckForward(request, {}, {}, response));
  }
}

TEST_P(IntegrationTest, ServerInfoReportsBackendLimitsAndBatching) {
  v1::GetServerInfoResponse info;
  auto context = ContextWithDeadline();
  ASSERT_TRUE(stub_->GetServerInfo(context.get(), {}, &info).ok());
  EXPECT_EQ(info.backend(), GetParam() == Backend::kCuda ? "cuda" : "cpu");
  EXPECT_FALSE(info.version().empty());
  EXPECT_EQ(info.limits().max_hidden_size(), 65536);
  EXPECT_EQ(info.limits().max_queued_bytes(), int64_t{1} << 30);
  EXPECT_EQ(info.batching().max_batch_rows(), 64);
  EXPECT_EQ(info.batching().max_queue_delay_us(), 200);
  EXPECT_EQ(info.batching().batches_in_flight(), 2);
  // --overlap_min_bytes left at its default on every backend.
  EXPECT_EQ(info.batching().overlap_min_bytes(), 0);
  // The test server leaves --idle_spin_us at -1: resolved for this host.
  EXPECT_EQ(info.batching().idle_spin_us(), ResolveIdleSpinUs(-1, UsableCpus()));
  if (GetParam() == Backend::kCuda) {
    EXPECT_EQ(info.devices_size(), VisibleGpuCount());
    const auto& l = info.limits();  // two slots, each its staging and its workspace (> 0)
    EXPECT_EQ(l.staging_buffer_bytes(), 2 << 20);
    EXPECT_GT(l.backward_workspace_bytes(), 0);
    EXPECT_GT(l.device_buffer_bytes(), 2 * (2 << 20) + 2 * l.backward_workspace_bytes());
  } else {
    EXPECT_EQ(info.devices_size() + info.limits().backward_workspace_bytes(), 0);
  }
}

TEST_P(IntegrationTest, RequestsSpreadOverEveryExecutor) {
  // With one executor per GPU, load must reach each of them.
  ExecutorPool& pool = server_->pool();
  if (pool.size() < 2) {
    GTEST_SKIP() << "one executor: spreading needs two or more GPUs";
  }
  std::mt19937_64 rng(TestSeed() + 5);
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 local(TestSeed() + 3000 + c);
      auto stub = Connect(server_->grpc_port());
      for (int i = 0; i < 40; ++i) {
        ForwardCase fc;
        fc.shape = {4, 4096};
        ForwardRequest made = MakeForwardRequest(local, fc, i);
        v1::NormalizeResponse response;
        auto context = ContextWithDeadline();
        ASSERT_TRUE(stub->Normalize(context.get(), made.request, &response).ok());
      }
    });
  }
  for (auto& client : clients) client.join();
  for (int i = 0; i < pool.size(); ++i) {
    EXPECT_GT(server_->metrics().device(i).batch_rows->Collect().histogram.sample_count, 0u)
        << pool.executor(i).device().label << " ran no batch";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, IntegrationTest,
                         ::testing::Values(Backend::kCpu, Backend::kCuda),
                         [](const ::testing::TestParamInfo<Backend>& param_info) {
                           return std::string(BackendName(param_info.param));
                         });

}  // namespace
}  // namespace normsvc::server::testing
