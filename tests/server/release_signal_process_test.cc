// SIGUSR1 to the normsvc process gives freed heap memory back to the system
// at once (counted in normsvc_heap_releases_total, logged), and the server
// keeps serving: a request after the signal is answered correctly, and
// SIGTERM still drains and exits 0. In builds whose allocator cannot release
// (sanitizers) the signal changes nothing but the serving goes on.
#include <csignal>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "normsvc/client/channel.h"
#include "normsvc/client/client.h"
#include "server/memory_release.h"
#include "test_process.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

using normsvc::testing::ChildProcess;
using normsvc::testing::HttpGet;
using normsvc::testing::PickFreePort;
using normsvc::testing::TempDir;
using normsvc::testing::WaitForPort;

std::string ServerBinary() {
  return normsvc::testing::ProgramPath("NORMSVC_SERVER_BINARY", NORMSVC_SERVER_PATH);
}

// The value of an unlabelled sample in a Prometheus text exposition; -1 when absent.
double Sample(const std::string& exposition, const std::string& name) {
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

TEST(ReleaseSignalProcessTest, Sigusr1ReleasesFreedHeapNowAndServingContinues) {
  TempDir dir;
  const int grpc_port = PickFreePort(), metrics_port = PickFreePort();
  const std::string target = "127.0.0.1:" + std::to_string(grpc_port);
  // The idle releaser off: only the signal can release.
  ChildProcess server({ServerBinary(), "--backend=cpu", "--grpc_address=" + target,
                       "--metrics_address=127.0.0.1:" + std::to_string(metrics_port),
                       "--memory_release_interval_s=0"},
                      dir.File("normsvc.log"));
  ASSERT_TRUE(WaitForPort(grpc_port, std::chrono::seconds(30))) << server.Log();
  ASSERT_TRUE(WaitForPort(metrics_port, std::chrono::seconds(30))) << server.Log();
  const std::string releases = "normsvc_heap_releases_total";
  // The releases sample once `done(sample)` holds, polled for up to 5 s
  // (-1 while the series is absent): the port accepts before the first
  // scrape is served in full, slowly under ThreadSanitizer.
  const auto poll_releases = [&](auto done) {
    double seen = -1;
    for (int i = 0; i < 500; ++i) {
      seen = Sample(HttpGet(metrics_port, "/metrics"), releases);
      if (done(seen)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return seen;
  };
  ASSERT_EQ(poll_releases([](double seen) { return seen >= 0; }), 0.0) << server.Log();

  const bool supported = HeapReleaseSupported();  // the same build as the server
  for (int signal_count = 1; signal_count <= 2; ++signal_count) {
    ASSERT_EQ(kill(server.pid(), SIGUSR1), 0);
    const double expected = supported ? signal_count : 0;
    const double seen = poll_releases([&](double sample) { return sample == expected; });
    EXPECT_EQ(seen, expected) << server.Log();
  }
  if (supported) {
    EXPECT_NE(server.Log().find("on request: gave"), std::string::npos) << server.Log();
  }

  // Still serving: one request answered against the reference.
  std::mt19937_64 rng(TestSeed() + 901);
  client::ChannelOptions options;
  options.target = target;
  options.retry_max_attempts = 1;
  std::shared_ptr<grpc::Channel> channel = *client::MakeChannel(options);
  std::unique_ptr<v1::Normalizer::Stub> stub = v1::Normalizer::NewStub(channel);
  ForwardRequest made = MakeForwardRequest(rng, ForwardCase{}, 1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::NormalizeResponse response;
  const grpc::Status status = stub->Normalize(&context, made.request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(CheckForward(made.request, made.gamma, made.beta, response));

  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(30)), 0) << server.Log();
}

}  // namespace
}  // namespace normsvc::server::testing
