// normctl and normload against the echo server (which answers Normalize with
// the request's input): .npy round trips, exit codes, and normload's counts
// against the counts the server itself reports.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "normsvc/client/channel.h"
#include "normsvc/client/client.h"
#include "normsvc/client/tensor.h"
#include "normsvc/kernels/float16.h"
#include "tool_runner.h"

namespace normsvc::testing {
namespace {

class EchoToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<EchoServer>(dir_);
    ASSERT_TRUE(server_->ready()) << "echo server did not start";
  }
  // normctl with `args` and --target set to the echo server.
  std::vector<std::string> Normctl(std::vector<std::string> args) {
    args.insert(args.begin(), kNormctl);
    args.push_back("--target=" + server_->target());
    return args;
  }

  TempDir dir_;
  std::unique_ptr<EchoServer> server_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(EchoToolsTest, NormctlRoundTripsNpyFilesInEveryDtype) {
  const std::vector<float> x = WriteRandomNpy(dir_.File("x.npy"), {5, 3, 8}, rng_);
  struct Case {
    std::string dtype;
    client::NpyDType want_dtype;
    kernels::DType kernel_dtype;
    std::vector<std::string> extra;
  };
  const Case cases[] = {
      {"fp32", client::NpyDType::kFloat32, kernels::DType::kF32, {}},
      {"fp16", client::NpyDType::kFloat16, kernels::DType::kF16, {}},
      {"bf16", client::NpyDType::kBFloat16, kernels::DType::kBF16, {}},
      {"bf16", client::NpyDType::kBFloat16, kernels::DType::kBF16, {"--stream", "--chunk_rows=4"}}};
  for (const Case& c : cases) {
    std::vector<std::string> args =
        Normctl({"normalize", "--op=rmsnorm", "--in=" + dir_.File("x.npy"),
                 "--out=" + dir_.File("y.npy"), "--dtype=" + c.dtype});
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    std::remove(dir_.File("y.npy").c_str());
    const CommandResult run = RunCommand(args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    absl::StatusOr<client::NpyArray> y = client::ReadNpyFile(dir_.File("y.npy"));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->dtype, c.want_dtype);
    EXPECT_EQ(y->shape, (std::vector<int64_t>{5, 3, 8}));
    // The echo returns the input as sent: x rounded once to the dtype.
    for (size_t i = 0; i < x.size(); ++i) {
      float want = x[i];
      if (c.kernel_dtype == kernels::DType::kF16)
        want = kernels::HalfBitsToFloat(kernels::FloatToHalfBits(x[i]));
      if (c.kernel_dtype == kernels::DType::kBF16)
        want = kernels::Bf16BitsToFloat(kernels::FloatToBf16Bits(x[i]));
      ASSERT_EQ(kernels::LoadAsFloat(y->data.data(), c.kernel_dtype, static_cast<int64_t>(i)), want)
          << c.dtype << " element " << i;
    }
  }
}

TEST_F(EchoToolsTest, NormctlExitCodesAndMessages) {
  WriteRandomNpy(dir_.File("x.npy"), {2, 4}, rng_);
  std::ofstream(dir_.File("bad.npy")) << "\x93NUMPY\x01\x00garbage";
  CommandResult run = RunCommand(Normctl({"frobnicate"}));
  EXPECT_EQ(run.exit_code, 2);
  run = RunCommand(Normctl({"normalize", "--op=layernorm", "--out=" + dir_.File("y.npy")}));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  run = RunCommand(Normctl({"normalize", "--op=layernorm", "--in=" + dir_.File("x.npy"),
                            "--out=" + dir_.File("y.npy"), "--colour=blue"}));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--colour"), std::string::npos) << run.err;
  run = RunCommand(Normctl({"normalize", "--op=layernorm", "--in=" + dir_.File("bad.npy"),
                            "--out=" + dir_.File("y.npy")}));
  EXPECT_EQ(run.exit_code, 3) << run.err;
  // The echo server implements no parameter calls: the code name is shown.
  run = RunCommand(Normctl({"params", "list"}));
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_NE(run.err.find("UNIMPLEMENTED"), std::string::npos) << run.err;
  run = RunCommand(Normctl({"health"}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "SERVING\n");
  run = RunCommand({kNormctl, "health", "--target=127.0.0.1:" + std::to_string(PickFreePort()),
                    "--timeout_ms=2000"});
  EXPECT_EQ(run.exit_code, 5);
  EXPECT_NE(run.err.find("UNAVAILABLE"), std::string::npos) << run.err;
  run = RunCommand({kNormctl, "--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("exit codes"), std::string::npos);
}

TEST_F(EchoToolsTest, NormloadCountsMatchTheServerInClosedAndOpenLoop) {
  // Closed loop, unary, every response verified against its input.
  CommandResult closed = RunCommand(
      {kNormload, "--target=" + server_->target(), "--concurrency=8", "--channels=2",
       "--warmup_s=0.3", "--duration_s=1", "--verify", "--json=" + dir_.File("closed.json"),
       "--mix=op=layernorm,dtype=fp32,rows=2,hidden=256;op=rmsnorm,dtype=bf16,rows=1,hidden=512"});
  ASSERT_EQ(closed.exit_code, 0) << closed.err << closed.out;
  EXPECT_NE(closed.err.find("measure"), std::string::npos) << "no progress line: " << closed.err;
  EXPECT_NE(closed.out.find("throughput"), std::string::npos) << closed.out;
  // Open loop, half the requests over NormalizeStream.
  CommandResult open = RunCommand(
      {kNormload, "--target=" + server_->target(), "--rate=400", "--channels=2", "--warmup_s=0.3",
       "--duration_s=1", "--verify", "--quiet", "--json=" + dir_.File("open.json"),
       "--mix=op=layernorm,dtype=fp16,rows=3,hidden=128,transport=stream;rows=1,hidden=64"});
  ASSERT_EQ(open.exit_code, 0) << open.err << open.out;
  const auto [normalize, stream] = server_->StopAndCount();

  const google::protobuf::Struct c = ParseJson(ReadFile(dir_.File("closed.json")));
  const google::protobuf::Struct o = ParseJson(ReadFile(dir_.File("open.json")));
  EXPECT_EQ(Field(c, "schema").string_value(), "normload/v1");
  EXPECT_EQ(Field(c, "echo").bool_value(), true);  // detected from GetServerInfo
  EXPECT_EQ(Number(c, {"totals", "errors"}) + Number(o, {"totals", "errors"}), 0);
  EXPECT_GT(Number(c, {"measured", "ok"}), 0);
  EXPECT_GT(Number(o, {"measured", "ok"}), 0);
  EXPECT_EQ(Number(c, {"totals", "by_method", "Normalize", "ok"}) +
                Number(o, {"totals", "by_method", "Normalize", "ok"}),
            static_cast<double>(normalize));
  EXPECT_EQ(Number(o, {"totals", "by_method", "NormalizeStream", "ok"}),
            static_cast<double>(stream));
  EXPECT_EQ(Number(c, {"totals", "ok"}),
            Number(c, {"measured", "verified"}) + Number(c, {"warmup", "verified"}));
  EXPECT_EQ(Number(c, {"measured", "verify_failures"}), 0);
  // Open loop at 400/s for 1.3 s: Poisson count within generous bounds.
  const double sent = Number(o, {"totals", "ok"});
  EXPECT_GT(sent, 400 * 1.3 * 0.7);
  EXPECT_LT(sent, 400 * 1.3 * 1.3);
  const double p50 = Number(c, {"measured", "latency_ms", "p50"});
  const double p99 = Number(c, {"measured", "latency_ms", "p99"});
  EXPECT_GT(p50, 0);
  EXPECT_LE(p50, p99);
  EXPECT_LE(p99, Number(c, {"measured", "latency_ms", "max"}));
}

// A server that dies mid-run: normload still finishes on time, reports the
// failed requests by code and exits 4 (requests failed).
TEST_F(EchoToolsTest, NormloadSurvivesTheServerDying) {
  ChildProcess load({kNormload, "--target=" + server_->target(), "--concurrency=8", "--channels=2",
                     "--warmup_s=0.2", "--duration_s=1.5", "--deadline_ms=2000", "--quiet",
                     "--json=" + dir_.File("dying.json"),
                     "--mix=rows=2,hidden=256,transport=stream;rows=1,hidden=128"},
                    dir_.File("dying.log"));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  server_->Kill();
  ASSERT_EQ(load.Wait(std::chrono::seconds(30)), 4) << load.Log();
  const google::protobuf::Struct json = ParseJson(ReadFile(dir_.File("dying.json")));
  EXPECT_GT(Number(json, {"totals", "ok"}), 0);
  EXPECT_GT(Number(json, {"totals", "errors"}), 0);
  EXPECT_GT(Number(json, {"measured", "errors_by_code", "UNAVAILABLE"}), 0) << load.Log();
}

// Streams of a dead server are given up on (each reopened call answered
// nothing) with streams retired by age every 50 ms as well: rotation
// replaces only streams still open, and leaves the dead ones to the
// reopening path that counts their failures.
TEST_F(EchoToolsTest, NormloadGivesUpTheStreamsOfADeadServerWhileRotating) {
  ChildProcess load(
      {kNormload, "--target=" + server_->target(), "--concurrency=8", "--channels=2",
       "--warmup_s=0.2", "--duration_s=2", "--stream_rotate_ms=50", "--quiet",
       "--json=" + dir_.File("rotating.json"), "--mix=rows=2,hidden=256,transport=stream"},
      dir_.File("rotating.log"));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  server_->Kill();
  ASSERT_EQ(load.Wait(std::chrono::seconds(30)), 4) << load.Log();
  const google::protobuf::Struct json = ParseJson(ReadFile(dir_.File("rotating.json")));
  EXPECT_GT(Number(json, {"streams", "rotated"}), 0) << load.Log();
  EXPECT_EQ(Number(json, {"streams", "lost"}), 2) << load.Log();  // both channels' streams
}

TEST_F(EchoToolsTest, NormloadSweepWritesCsvAndPlot) {
  CommandResult sweep =
      RunCommand({kNormload, "--target=" + server_->target(), "--sweep=concurrency=1,4",
                  "--warmup_s=0.1", "--duration_s=0.4", "--quiet", "--channels=1",
                  "--csv=" + dir_.File("sweep.csv"), "--json=" + dir_.File("sweep.json"),
                  "--plot=" + dir_.File("sweep.png"), "--mix=rows=1,hidden=128"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const std::string csv = ReadFile(dir_.File("sweep.csv"));
  EXPECT_EQ(csv.rfind("concurrency,req_per_s,", 0), 0u) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
  const std::string png = ReadFile(dir_.File("sweep.png"));
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  const google::protobuf::Struct json = ParseJson(ReadFile(dir_.File("sweep.json")));
  EXPECT_EQ(Field(json, "points").list_value().values_size(), 2);
}

// round_robin over a name with two addresses sends calls to both servers.
// Calls are spread over a second at least: round_robin uses an address once
// its connection is up, and on a loaded machine the second one can take
// longer than a burst of calls to the first.
TEST(ChannelTest, RoundRobinSpreadsCallsOverEveryAddress) {
  TempDir dir_a, dir_b;
  EchoServer a(dir_a), b(dir_b);
  ASSERT_TRUE(a.ready() && b.ready());
  constexpr int kMinCalls = 20;
  int calls = 0;
  {  // the channel closes before the servers stop
    client::ChannelOptions options;
    options.target = "ipv4:" + a.target() + "," + b.target();
    options.load_balancing_policy = "round_robin";
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::MakeChannel(options);
    ASSERT_TRUE(channel.ok()) << channel.status();
    client::NormalizerClient normalizer(*channel);
    v1::NormalizeRequest request;
    request.set_op(v1::RMS_NORM);
    const std::vector<int64_t> shape = {1, 4};
    *request.mutable_input() =
        *client::MakeTensorFromFloats(v1::FP32, shape, std::vector<float>{1.5f, -2, 3, 0.25f});
    const absl::Time start = absl::Now();
    while (calls < kMinCalls || absl::Now() - start < absl::Seconds(1)) {
      absl::StatusOr<v1::NormalizeResponse> response =
          normalizer.Normalize(request, {.timeout = absl::Seconds(10), .wait_for_ready = true});
      ASSERT_TRUE(response.ok()) << response.status();
      EXPECT_EQ(response->output().data(), request.input().data());
      ++calls;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  const auto [count_a, stream_a] = a.StopAndCount();
  const auto [count_b, stream_b] = b.StopAndCount();
  EXPECT_EQ(count_a + count_b, calls);
  EXPECT_GT(count_a, 0);
  EXPECT_GT(count_b, 0);
}

// TLS from PEM files: normctl and normload reach a TLS echo server with the
// CA file, and fail without TLS.
TEST(ChannelTest, TlsCredentialsFromFiles) {
  TempDir dir;
  const CommandResult keygen =
      RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                  "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                  "-keyout", dir.File("key.pem"), "-out", dir.File("cert.pem")});
  if (keygen.exit_code == 127) GTEST_SKIP() << "no /usr/bin/openssl to make a test certificate";
  ASSERT_EQ(keygen.exit_code, 0) << keygen.err;
  const int port = PickFreePort();
  const std::string target = "127.0.0.1:" + std::to_string(port);
  ChildProcess server(
      {kEchoServer, "--address=" + target, "--tls_cert_file=" + dir.File("cert.pem"),
       "--tls_key_file=" + dir.File("key.pem")},
      dir.File("echo.log"));
  ASSERT_TRUE(WaitForPort(port, std::chrono::seconds(20))) << server.Log();
  CommandResult run = RunCommand({kNormctl, "health", "--target=" + target,
                                  "--tls_ca_file=" + dir.File("cert.pem"), "--timeout_ms=10000"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "SERVING\n");
  run = RunCommand({kNormctl, "health", "--target=" + target, "--timeout_ms=3000"});
  EXPECT_EQ(run.exit_code, 5) << run.out;
  run = RunCommand({kNormload, "--target=" + target, "--tls_ca_file=" + dir.File("cert.pem"),
                    "--concurrency=2", "--channels=1", "--warmup_s=0", "--duration_s=0.3",
                    "--quiet", "--verify", "--mix=rows=1,hidden=64"});
  EXPECT_EQ(run.exit_code, 0) << run.err << run.out;
  EXPECT_NE(run.out.find(" 0 mismatches"), std::string::npos) << run.out;
  EXPECT_EQ(server.Stop(SIGINT, std::chrono::seconds(10)), 0);
}

TEST(ChannelTest, ServiceConfigCarriesPolicyAndRetries) {
  client::ChannelOptions options;
  options.load_balancing_policy = "round_robin";
  options.retry_max_attempts = 4;
  options.retry_resource_exhausted = true;
  const google::protobuf::Struct config = ParseJson(client::BuildServiceConfigJson(options));
  const auto& lb = Field(config, "loadBalancingConfig").list_value();
  ASSERT_EQ(lb.values_size(), 1);
  EXPECT_TRUE(lb.values(0).struct_value().fields().contains("round_robin"));
  const auto& method = Field(config, "methodConfig").list_value().values(0).struct_value();
  EXPECT_EQ(Number(method, {"retryPolicy", "maxAttempts"}), 4);
  const auto& codes =
      method.fields().at("retryPolicy").struct_value().fields().at("retryableStatusCodes");
  ASSERT_EQ(codes.list_value().values_size(), 2);
  EXPECT_EQ(codes.list_value().values(1).string_value(), "RESOURCE_EXHAUSTED");
  options.retry_max_attempts = 1;
  EXPECT_FALSE(
      ParseJson(client::BuildServiceConfigJson(options)).fields().contains("methodConfig"));
  options.load_balancing_policy = "random";
  EXPECT_FALSE(client::MakeChannel(options).ok());
}

}  // namespace
}  // namespace normsvc::testing
