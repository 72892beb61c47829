// Graceful drain of the normsvc process itself: SIGTERM with hundreds of
// requests queued (unary and streamed). Every request the server accepted
// is answered OK with a correct result, requests sent after the signal get
// UNAVAILABLE, and the process exits 0 within its drain timeout.
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "normsvc/client/channel.h"
#include "normsvc/client/client.h"
#include "test_process.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

// The normsvc binary: NORMSVC_SERVER_BINARY when set, else the build's.
std::string ServerBinary() {
  return normsvc::testing::ProgramPath("NORMSVC_SERVER_BINARY", NORMSVC_SERVER_PATH);
}

using Clock = std::chrono::steady_clock;
using normsvc::testing::ChildProcess;
using normsvc::testing::HttpGet;
using normsvc::testing::PickFreePort;
using normsvc::testing::TempDir;
using normsvc::testing::WaitForPort;

constexpr int kUnaryRequests = 320;
constexpr int kStreams = 4;
constexpr int kRequestsPerStream = 20;  // below --max_stream_in_flight: all are read at once
constexpr int kAccepted = kUnaryRequests + kStreams * kRequestsPerStream;
constexpr int kDrainTimeoutS = 60;

// The sum of a family's samples (all label sets) in a Prometheus text
// exposition; -1 when absent.
double SumSamples(const std::string& exposition, const std::string& family) {
  std::istringstream lines(exposition);
  std::string line;
  double sum = -1;
  while (std::getline(lines, line)) {
    if (line.rfind(family, 0) != 0 || line.size() <= family.size()) continue;
    if (line[family.size()] != '{' && line[family.size()] != ' ') continue;
    sum = std::max(sum, 0.0) + std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

struct UnaryCall {
  ForwardRequest made;
  grpc::ClientContext context;
  v1::NormalizeResponse response;
  grpc::Status status;
  bool done = false;
};

TEST(DrainProcessTest, SigtermWithHundredsInFlightAnswersEveryAcceptedRequest) {
  TempDir dir;
  const int grpc_port = PickFreePort(), metrics_port = PickFreePort();
  const std::string target = "127.0.0.1:" + std::to_string(grpc_port);
  // Batches wait for the queue delay (a minute) and never fill, so every
  // request stays queued until the signal; the drain then launches them.
  ChildProcess server(
      {ServerBinary(), "--backend=cpu", "--grpc_address=" + target,
       "--metrics_address=127.0.0.1:" + std::to_string(metrics_port),
       "--max_queue_delay_us=60000000", "--max_batch_rows=1000000", "--max_batch_bytes=1073741824",
       "--drain_timeout_s=" + std::to_string(kDrainTimeoutS), "--drain_grace_ms=1000"},
      dir.File("normsvc.log"));
  ASSERT_TRUE(WaitForPort(grpc_port, std::chrono::seconds(30))) << server.Log();
  ASSERT_TRUE(WaitForPort(metrics_port, std::chrono::seconds(30))) << server.Log();

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Normalizer::Stub>> stubs;
  for (int i = 0; i < 4; ++i) {
    client::ChannelOptions options;
    options.target = target;
    options.retry_max_attempts = 1;
    options.dedicated_connection = true;
    channels.push_back(*client::MakeChannel(options));
    stubs.push_back(v1::Normalizer::NewStub(channels.back()));
  }

  // Unary: LayerNorm fp32 [8, 4096] with inline gamma and beta.
  std::mt19937_64 rng(TestSeed() + 900);
  std::mutex mutex;
  std::condition_variable done_cv;
  int unary_done = 0;
  std::vector<std::unique_ptr<UnaryCall>> calls;
  for (int i = 0; i < kUnaryRequests; ++i) {
    auto call = std::make_unique<UnaryCall>();
    ForwardCase fc;
    fc.shape = {8, 4096};
    fc.inline_gamma = fc.inline_beta = true;
    call->made = MakeForwardRequest(rng, fc, i);
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    UnaryCall* raw = call.get();
    stubs[i % stubs.size()]->async()->Normalize(&raw->context, &raw->made.request, &raw->response,
                                                [&, raw](grpc::Status status) {
                                                  std::lock_guard<std::mutex> lock(mutex);
                                                  raw->status = std::move(status);
                                                  raw->done = true;
                                                  ++unary_done;
                                                  done_cv.notify_all();
                                                });
    calls.push_back(std::move(call));
  }
  // Streams: RMSNorm bf16 [4, 4096], all written at once and left open.
  struct StreamOutcome {
    int ok = 0, wrong = 0, errors = 0;
    grpc::Status final_status;
  };
  std::vector<StreamOutcome> stream_outcomes(kStreams);
  std::vector<std::thread> streams;
  for (int s = 0; s < kStreams; ++s) {
    streams.emplace_back([&, s] {
      std::mt19937_64 stream_rng(TestSeed() + 950 + s);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      auto stream = stubs[s]->NormalizeStream(&context);
      std::map<uint64_t, ForwardRequest> sent;
      for (int i = 0; i < kRequestsPerStream; ++i) {
        ForwardCase fc;
        fc.op = NormOp::kRmsNorm;
        fc.dtype = DType::kBF16;
        fc.shape = {4, 4096};
        fc.inline_gamma = true;
        ForwardRequest made = MakeForwardRequest(stream_rng, fc, i);
        if (!stream->Write(made.request)) break;
        sent.emplace(i, std::move(made));
      }
      StreamOutcome& outcome = stream_outcomes[s];
      v1::NormalizeStreamResponse reply;
      while (stream->Read(&reply)) {
        if (reply.has_error()) {
          ++outcome.errors;
          continue;
        }
        const ForwardRequest& made = sent.at(reply.request_id());
        if (CheckForward(made.request, made.gamma, made.beta, reply.response())) {
          ++outcome.ok;
        } else {
          ++outcome.wrong;
        }
      }
      outcome.final_status = stream->Finish();
    });
  }

  // Every request accepted and queued before the signal.
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  double pending = -1;
  while (Clock::now() < give_up) {
    pending = SumSamples(HttpGet(metrics_port, "/metrics"), "normsvc_pending_requests");
    if (pending >= kAccepted) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(pending, kAccepted) << "not every request was queued before the signal";
  {
    std::lock_guard<std::mutex> lock(mutex);
    ASSERT_EQ(unary_done, 0) << "a request finished before the signal";
  }

  const Clock::time_point signalled = Clock::now();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  // Requests sent once the drain has begun (health NOT_SERVING) are refused.
  client::NormalizerClient late_client(channels[0]);
  bool not_serving = false;
  while (!not_serving && Clock::now() < signalled + std::chrono::seconds(10)) {
    absl::StatusOr<client::ServingStatus> health = late_client.CheckHealth();
    not_serving = !health.ok() || *health == client::ServingStatus::kNotServing;
    if (!not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(not_serving) << "health stayed SERVING after SIGTERM";
  int late_unavailable = 0;
  for (int i = 0; i < 20; ++i) {
    ForwardRequest late = MakeForwardRequest(rng, ForwardCase{}, 10000 + i);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::NormalizeResponse response;
    const grpc::Status status =
        stubs[i % stubs.size()]->Normalize(&context, late.request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    late_unavailable += status.error_code() == grpc::StatusCode::UNAVAILABLE;
  }
  {
    grpc::ClientContext context;
    auto late_stream = stubs[0]->NormalizeStream(&context);
    late_stream->Write(MakeForwardRequest(rng, ForwardCase{}, 20000).request);
    v1::NormalizeStreamResponse reply;
    while (late_stream->Read(&reply))
      EXPECT_FALSE(reply.has_response()) << "a late stream was served";
    EXPECT_EQ(late_stream->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }

  // The process exits 0 within the drain timeout.
  const int exit_status = server.Wait(std::chrono::seconds(kDrainTimeoutS + 10));
  const double stop_seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_EQ(exit_status, 0) << server.Log();
  EXPECT_LT(stop_seconds, kDrainTimeoutS);

  // Every accepted request was answered, OK and right.
  for (std::thread& stream : streams) stream.join();
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done_cv.wait_for(lock, std::chrono::seconds(30),
                                 [&] { return unary_done == kUnaryRequests; }))
        << unary_done << " of " << kUnaryRequests << " unary requests finished";
  }
  int unary_ok = 0;
  for (const auto& call : calls) {
    EXPECT_TRUE(call->status.ok())
        << call->made.request.request_id() << ": " << call->status.error_code() << " "
        << call->status.error_message();
    if (call->status.ok()) {
      EXPECT_TRUE(
          CheckForward(call->made.request, call->made.gamma, call->made.beta, call->response));
      ++unary_ok;
    }
  }
  EXPECT_EQ(unary_ok, kUnaryRequests);
  for (const StreamOutcome& outcome : stream_outcomes) {
    EXPECT_EQ(outcome.ok, kRequestsPerStream);
    EXPECT_EQ(outcome.wrong, 0);
    EXPECT_EQ(outcome.errors, 0);
    // An open stream ends once its accepted requests are answered.
    EXPECT_EQ(outcome.final_status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << outcome.final_status.error_message();
  }
  EXPECT_EQ(late_unavailable, 20);
  std::cerr << "[ drain ] " << kAccepted << " requests queued at SIGTERM; exit " << exit_status
            << " after " << stop_seconds << " s\n";
}

// A second SIGTERM while the stop waits (here in --drain_grace_ms, a minute)
// ends the process at once with exit status 3, without waiting for the stop.
TEST(DrainProcessTest, ASecondSigtermDuringTheStopExitsAtOnce) {
  TempDir dir;
  const int grpc_port = PickFreePort();
  ChildProcess server(
      {ServerBinary(), "--backend=cpu", "--grpc_address=127.0.0.1:" + std::to_string(grpc_port),
       "--metrics_address=", "--drain_timeout_s=120", "--drain_grace_ms=60000"},
      dir.File("normsvc.log"));
  ASSERT_TRUE(WaitForPort(grpc_port, std::chrono::seconds(30))) << server.Log();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  // The first signal must have been taken before the second is sent (two
  // pending SIGTERMs are one).
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (server.Log().find("draining") == std::string::npos && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(server.Log().find("draining"), std::string::npos) << server.Log();
  EXPECT_EQ(server.Wait(std::chrono::milliseconds(300)), -1) << "exited before the second signal";
  const auto signalled = Clock::now();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  const int exit_status = server.Wait(std::chrono::seconds(10));
  EXPECT_EQ(exit_status, 3) << server.Log();
  EXPECT_LT(Clock::now() - signalled, std::chrono::seconds(5));
  EXPECT_NE(server.Log().find("while stopping: exiting without waiting"), std::string::npos)
      << server.Log();
}

}  // namespace
}  // namespace normsvc::server::testing
