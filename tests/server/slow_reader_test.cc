// A NormalizeStream client that sends and does not read its replies: the
// replies waiting for it hold their bytes of --max_queued_bytes, so the
// server refuses new requests RESOURCE_EXHAUSTED instead of keeping ever
// more replies in memory; once the client reads, every reply arrives, each
// right, and the budget comes back.
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/server.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kHidden = 1024;  // fp32: 1 MiB a tensor
constexpr int64_t kTensorBytes = kRows * kHidden * 4;
constexpr int kStreamRequests = 48;

TEST(SlowReaderTest, UnsentStreamRepliesHoldTheQueuedBytesUntilTheClientReads) {
  ServerOptions options = TestServerOptions();
  // Room for 8 requests (input + output) or 16 unsent replies at a time.
  options.max_queued_bytes = 16 * kTensorBytes;
  options.max_stream_in_flight = kStreamRequests;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);

  // The slow client's channel buffers little of what it does not read: no
  // BDP probing (the flow-control window stays at gRPC's initial one).
  grpc::ChannelArguments slow_arguments;
  slow_arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  slow_arguments.SetMaxReceiveMessageSize(-1);
  slow_arguments.SetMaxSendMessageSize(-1);
  auto slow = v1::Normalizer::NewStub(ConnectedChannel(server->grpc_port(), slow_arguments));
  auto other = Connect(server->grpc_port());

  std::mt19937_64 rng(TestSeed());
  std::map<uint64_t, v1::NormalizeRequest> sent;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = slow->NormalizeStream(&context);
  for (int i = 0; i < kStreamRequests; ++i) {
    v1::NormalizeRequest request;
    request.set_request_id(static_cast<uint64_t>(i + 1));
    request.set_op(v1::RMS_NORM);
    request.set_epsilon(1e-5f);
    *request.mutable_input() = ToProto(RandomTensor(rng, DType::kF32, {kRows, kHidden}));
    ASSERT_TRUE(stream->Write(request)) << i;
    sent.emplace(request.request_id(), std::move(request));
  }

  // While the replies wait for the client, a small request elsewhere finds
  // the budget taken (within 30 s: the server computes the stream's
  // requests meanwhile). Without the replies counted it would always pass.
  v1::NormalizeRequest probe;
  probe.set_op(v1::RMS_NORM);
  probe.set_epsilon(1e-5f);
  *probe.mutable_input() = ToProto(RandomTensor(rng, DType::kF32, {kRows, kHidden}));
  grpc::Status refused;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    v1::NormalizeResponse response;
    refused = other->Normalize(ContextWithDeadline(10).get(), probe, &response);
    if (refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("max_queued_bytes"), std::string::npos)
      << refused.error_message();

  // The client reads: every request is answered once, right or refused for
  // the budget, and some were computed.
  ASSERT_TRUE(stream->WritesDone());
  int computed = 0;
  int exhausted = 0;
  std::map<uint64_t, int> answers;
  v1::NormalizeStreamResponse reply;
  while (stream->Read(&reply)) {
    ++answers[reply.request_id()];
    const auto it = sent.find(reply.request_id());
    ASSERT_NE(it, sent.end()) << reply.request_id();
    if (reply.has_error()) {
      EXPECT_EQ(reply.error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED))
          << reply.error().message();
      ++exhausted;
      continue;
    }
    ASSERT_TRUE(reply.has_response());
    EXPECT_TRUE(CheckForward(it->second, {}, {}, reply.response())) << reply.request_id();
    ++computed;
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(answers.size(), sent.size());
  for (const auto& [id, count] : answers) EXPECT_EQ(count, 1) << id;
  EXPECT_EQ(computed + exhausted, kStreamRequests);
  EXPECT_GT(computed, 0);

  // Everything is written: the budget is free again.
  v1::NormalizeResponse response;
  const grpc::Status after = other->Normalize(ContextWithDeadline(30).get(), probe, &response);
  EXPECT_TRUE(after.ok()) << after.error_message();
  EXPECT_TRUE(CheckForward(probe, {}, {}, response));
  EXPECT_TRUE(server->Stop());
}

}  // namespace
}  // namespace normsvc::server::testing
