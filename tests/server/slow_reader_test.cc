// A NormalizeStream client that sends and does not read its replies: its
// requests and the replies waiting for it hold their bytes of
// --max_queued_bytes, up to a quarter of it, and then the stream stops
// reading (HTTP/2 flow control holds the client back). The server's memory
// stays bounded and other clients are served meanwhile; once the client
// reads, every request is answered once, right, and the budget comes back.
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/server.h"
#include "server/service_context.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kHidden = 1024;  // fp32: 1 MiB a tensor
constexpr int64_t kTensorBytes = kRows * kHidden * 4;
constexpr int kStreamRequests = 48;

v1::NormalizeRequest RmsRequest(std::mt19937_64& rng, uint64_t id) {
  v1::NormalizeRequest request;
  request.set_request_id(id);
  request.set_op(v1::RMS_NORM);
  request.set_epsilon(1e-5f);
  *request.mutable_input() = ToProto(RandomTensor(rng, DType::kF32, {kRows, kHidden}));
  return request;
}

TEST(SlowReaderTest, AStreamThatIsNotReadHoldsAtMostItsShareOfTheQueuedBytes) {
  ServerOptions options = TestServerOptions();
  // 32 requests' bytes (input and output), or 64 replies; a stream may hold
  // a quarter: 8 requests or 16 replies.
  options.max_queued_bytes = 64 * kTensorBytes;
  options.max_stream_in_flight = kStreamRequests;
  const int64_t stream_share = options.max_queued_bytes / kStreamShare;
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
  for (int i = 0; i < kStreamRequests; ++i) {
    v1::NormalizeRequest request = RmsRequest(rng, static_cast<uint64_t>(i + 1));
    sent.emplace(request.request_id(), std::move(request));
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = slow->NormalizeStream(&context);
  // The writer blocks once the server stops reading; it finishes after the
  // replies are read below.
  std::thread writer([&] {
    for (const auto& [id, request] : sent) {
      if (!stream->Write(request)) return;
    }
    stream->WritesDone();
  });
  // On an early return (a failed ASSERT) the call is cancelled, which ends
  // the writer's blocked Write, before the thread is joined.
  struct JoinWriter {
    grpc::ClientContext& context;
    std::thread& writer;
    ~JoinWriter() {
      if (writer.joinable()) {
        context.TryCancel();
        writer.join();
      }
    }
  } join_writer{context, writer};

  // Until the server's held bytes stop changing: the stream has stopped
  // reading (its replies are stuck behind the client's flow control).
  int64_t held = -1;
  int steady = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (steady < 10 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const int64_t now = server->queued_bytes();
    steady = now == held && now > 0 ? steady + 1 : 0;
    held = now;
  }
  ASSERT_EQ(steady, 10) << "the server's held bytes never settled";
  // At most the stream's share and one more request (the one read last,
  // charged as it was scheduled) of the whole budget.
  EXPECT_LE(held, stream_share + 2 * kTensorBytes) << "of " << options.max_queued_bytes;

  // Other clients are served meanwhile (without the share, the stream
  // would hold the whole budget and they would get RESOURCE_EXHAUSTED).
  v1::NormalizeRequest probe = RmsRequest(rng, 1000);
  for (int i = 0; i < 5; ++i) {
    v1::NormalizeResponse response;
    const grpc::Status status = other->Normalize(ContextWithDeadline(30).get(), probe, &response);
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
    EXPECT_TRUE(CheckForward(probe, {}, {}, response)) << i;
  }

  // The client reads: every request is answered once and right.
  std::map<uint64_t, int> answers;
  v1::NormalizeStreamResponse reply;
  while (stream->Read(&reply)) {
    ++answers[reply.request_id()];
    const auto it = sent.find(reply.request_id());
    ASSERT_NE(it, sent.end()) << reply.request_id();
    ASSERT_TRUE(reply.has_response()) << reply.request_id() << ": " << reply.error().message();
    EXPECT_TRUE(CheckForward(it->second, {}, {}, reply.response())) << reply.request_id();
  }
  writer.join();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(answers.size(), sent.size());
  for (const auto& [id, count] : answers) EXPECT_EQ(count, 1) << id;

  // Everything is written: the budget is free again.
  EXPECT_TRUE(QueuedBytesReturnToZero(*server));
  EXPECT_TRUE(server->Stop());
}

}  // namespace
}  // namespace normsvc::server::testing
