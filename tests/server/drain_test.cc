// Graceful stop under load: health goes NOT_SERVING, new requests get
// UNAVAILABLE, and every request the server accepted is answered; none is
// lost, cancelled or failed.
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "server/executor_pool.h"
#include "server/metrics.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Outcomes {
  std::atomic<int> ok{0};
  std::atomic<int> unavailable{0};
  std::atomic<int> other{0};
  std::mutex mutex;
  std::vector<std::string> other_messages;
  void Record(const grpc::Status& status) {
    if (status.ok()) {
      ok.fetch_add(1);
    } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      unavailable.fetch_add(1);
    } else {
      other.fetch_add(1);
      std::lock_guard<std::mutex> lock(mutex);
      other_messages.push_back(std::to_string(status.error_code()) + ": " + status.error_message());
    }
  }
};

TEST(DrainTest, EveryAcceptedRequestIsAnsweredWhenStoppingUnderLoad) {
  ServerOptions options = TestServerOptions();
  options.max_queue_delay_us = 300000;  // requests pile up in the queue
  options.max_batch_rows = 1 << 20;
  options.drain_grace_ms = 200;  // clients still sending see UNAVAILABLE, not a closed transport
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const int port = server->grpc_port();

  Outcomes unary, streamed;
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(TestSeed() + 500 + c);
      auto stub = Connect(port);
      for (int i = 0; i < 1000; ++i) {
        ForwardCase fc;
        fc.shape = {2, 256};
        ForwardRequest made = MakeForwardRequest(rng, fc, i);
        v1::NormalizeResponse response;
        auto context = ContextWithDeadline(30);
        const grpc::Status status = stub->Normalize(context.get(), made.request, &response);
        unary.Record(status);
        if (status.ok() && !CheckForward(made.request, made.gamma, made.beta, response)) wrong++;
        if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return;  // refused: draining
      }
    });
  }
  std::atomic<int> stream_final_bad{0};
  for (int s = 0; s < 2; ++s) {
    clients.emplace_back([&, s] {
      std::mt19937_64 rng(TestSeed() + 600 + s);
      auto stub = Connect(port);
      auto context = ContextWithDeadline(30);
      auto stream = stub->NormalizeStream(context.get());
      std::map<uint64_t, ForwardRequest> sent;
      std::mutex sent_mutex;
      std::thread writer([&] {
        for (uint64_t i = 0; i < 2000; ++i) {
          ForwardCase fc;
          fc.op = NormOp::kRmsNorm;
          fc.shape = {1, 128};
          ForwardRequest made = MakeForwardRequest(rng, fc, i);
          {
            std::lock_guard<std::mutex> lock(sent_mutex);
            sent[i] = made;
          }
          if (!stream->Write(made.request)) return;  // the server finished the stream
        }
        stream->WritesDone();
      });
      v1::NormalizeStreamResponse reply;
      while (stream->Read(&reply)) {
        if (reply.has_error()) {
          streamed.Record(grpc::Status(static_cast<grpc::StatusCode>(reply.error().code()),
                                       reply.error().message()));
          continue;
        }
        streamed.Record(grpc::Status::OK);
        std::lock_guard<std::mutex> lock(sent_mutex);
        const ForwardRequest& made = sent.at(reply.request_id());
        if (!CheckForward(made.request, made.gamma, made.beta, reply.response())) wrong++;
      }
      writer.join();
      const grpc::Status final_status = stream->Finish();
      if (!final_status.ok() && final_status.error_code() != grpc::StatusCode::UNAVAILABLE) {
        stream_final_bad++;
      }
    });
  }

  // Stop while requests are queued, waiting on the batching delay.
  const auto wait_until = Clock::now() + std::chrono::seconds(20);
  while (server->pool().batcher(0).pending_requests() < 12 && Clock::now() < wait_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(server->pool().batcher(0).pending_requests(), 12) << "the load never queued up";
  // Read in this order, nothing counted in ok_before_stop is still queued.
  const int ok_before_stop = unary.ok.load() + streamed.ok.load();
  const int64_t queued_at_stop = server->pool().batcher(0).pending_requests();
  const auto stop_started = Clock::now();
  EXPECT_TRUE(server->Stop());
  EXPECT_LT(Clock::now() - stop_started, std::chrono::seconds(10));
  for (auto& client : clients) client.join();

  EXPECT_EQ(unary.other.load() + streamed.other.load(), 0)
      << (unary.other_messages.empty() ? "" : unary.other_messages.front())
      << (streamed.other_messages.empty() ? "" : streamed.other_messages.front());
  EXPECT_EQ(stream_final_bad.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(unary.unavailable.load(), 0) << "no request was refused during the drain";
  // What was queued at the stop was answered, not dropped...
  EXPECT_GE(unary.ok.load() + streamed.ok.load(), ok_before_stop + queued_at_stop);
  // ...and every request the server answered OK reached its client.
  const prometheus::Registry& registry = *server->metrics().registry();
  const auto server_ok = [&](const char* method, const char* op) {
    return SeriesValue(registry, "normsvc_requests_total",
                       {{"method", method}, {"op", op}, {"dtype", "fp32"}, {"code", "OK"}})
        .value_or(-1);
  };
  EXPECT_EQ(server_ok("Normalize", "layer_norm"), unary.ok.load());
  EXPECT_EQ(server_ok("NormalizeStream", "rms_norm"), streamed.ok.load());
  EXPECT_EQ(server->pool().batcher(0).pending_requests(), 0);
}

TEST(DrainTest, IdleOpenStreamsDoNotHoldUpTheStop) {
  std::unique_ptr<Server> server = StartServer(TestServerOptions());
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->grpc_port());
  auto context = ContextWithDeadline(30);
  auto stream = stub->NormalizeStream(context.get());
  std::mt19937_64 rng(TestSeed() + 700);
  ForwardRequest made = MakeForwardRequest(rng, ForwardCase{}, 1);
  ASSERT_TRUE(stream->Write(made.request));
  v1::NormalizeStreamResponse reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_TRUE(CheckForward(made.request, made.gamma, made.beta, reply.response()));
  // The stream stays open and idle while the server stops.
  const auto start = Clock::now();
  EXPECT_TRUE(server->Stop());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

// A stream whose client sends large requests and reads no reply: the
// server answers them, but the replies cannot all be written before the
// drain timeout, so the stop must not report a clean drain (each stream
// request leaves the drain gate when its reply is written or dropped, not
// when its task is done).
TEST(DrainTest, RepliesAStreamNeverReadMakeTheStopReportTheTimeout) {
  ServerOptions options = TestServerOptions();
  options.drain_timeout_s = 2;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->grpc_port());
  auto context = ContextWithDeadline(60);
  auto stream = stub->NormalizeStream(context.get());
  std::atomic<int> written{0};
  std::thread writer([&] {
    std::mt19937_64 rng(TestSeed() + 800);
    ForwardCase fc;
    fc.shape = {4, 65536};  // 1 MiB requests and replies
    const ForwardRequest made = MakeForwardRequest(rng, fc, 1);
    for (int i = 0; i < 64; ++i) {
      if (!stream->Write(made.request)) return;  // the server ended the stream
      written++;
    }
  });
  // Wait until the server has answered more replies than the client's
  // transport takes in without reading (a few MiB).
  const prometheus::Registry& registry = *server->metrics().registry();
  const auto answered = [&] {
    return SeriesValue(registry, "normsvc_requests_total",
                       {{"method", "NormalizeStream"},
                        {"op", "layer_norm"},
                        {"dtype", "fp32"},
                        {"code", "OK"}})
        .value_or(0);
  };
  const auto wait_until = Clock::now() + std::chrono::seconds(20);
  while (answered() < 12 && Clock::now() < wait_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool loaded = answered() >= 12;
  EXPECT_TRUE(loaded) << written.load() << " requests written";
  if (loaded) {
    EXPECT_FALSE(server->Stop()) << "replies left unwritten, yet the drain was reported complete";
  }
  context->TryCancel();
  writer.join();  // before any return: a joinable thread's destructor ends the process
}

}  // namespace
}  // namespace normsvc::server::testing
