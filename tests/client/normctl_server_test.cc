// normctl against a CPU-backend normsvc on loopback: scalar statistics of a
// 1-D input, empty inputs over a stream, and flag combinations refused
// before any call (and before any file is written).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "normsvc/client/npy.h"
#include "normsvc_server.h"
#include "tool_runner.h"

namespace normsvc::testing {
namespace {

class NormctlServerTest : public ServerSuiteTest<NormctlServerTest> {
 protected:
  static double Calls() { return server_->RequestsTotal({"method=\"Normalize"}); }
};

client::NpyArray Load(const std::string& path) {
  absl::StatusOr<client::NpyArray> array = client::ReadNpyFile(path);
  EXPECT_TRUE(array.ok()) << array.status();
  return array.ok() ? *array : client::NpyArray{};
}

float Float(const client::NpyArray& array, size_t i) {
  float value = 0;
  std::memcpy(&value, array.data.data() + 4 * i, 4);
  return value;
}

// A vector [H] is one row: its mean and rstd are scalars (0-d .npy), over
// Normalize and over NormalizeStream alike, and backward takes them back.
TEST_F(NormctlServerTest, OneDimensionalInputGivesScalarStatistics) {
  constexpr int kHidden = 96;
  const std::vector<float> x = WriteRandomNpy(dir_->File("v.npy"), {kHidden}, rng_);
  double mean = 0, square = 0;
  for (float value : x) mean += value / double{kHidden};
  for (float value : x) square += (value - mean) * (value - mean) / kHidden;
  const double rstd = 1.0 / std::sqrt(square + 1e-5);
  for (const char* transport : {"--stream=false", "--stream"}) {
    SCOPED_TRACE(transport);
    const CommandResult run =
        RunCommand(Normctl({"normalize", "--op=layernorm", "--in=" + dir_->File("v.npy"), transport,
                            "--out=" + dir_->File("vy.npy"), "--mean_out=" + dir_->File("vm.npy"),
                            "--rstd_out=" + dir_->File("vr.npy")}));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const client::NpyArray y = Load(dir_->File("vy.npy"));
    const client::NpyArray m = Load(dir_->File("vm.npy"));
    const client::NpyArray r = Load(dir_->File("vr.npy"));
    EXPECT_EQ(y.shape, (std::vector<int64_t>{kHidden}));
    EXPECT_TRUE(m.shape.empty());
    EXPECT_TRUE(r.shape.empty());
    ASSERT_EQ(m.data.size(), 4u);
    ASSERT_EQ(r.data.size(), 4u);
    EXPECT_NEAR(Float(m, 0), mean, 1e-5 * std::max(1.0, std::fabs(mean)));
    EXPECT_NEAR(Float(r, 0), rstd, 1e-5 * rstd);
    EXPECT_NEAR(Float(y, 5), (x[5] - mean) * rstd, 1e-5 * std::max(1.0, std::fabs(double{x[5]})));
  }
  // The 0-d files feed the backward as they are.
  const std::vector<float> dy = WriteRandomNpy(dir_->File("vdy.npy"), {kHidden}, rng_);
  std::remove(dir_->File("vdx.npy").c_str());
  const CommandResult run =
      RunCommand(Normctl({"backward", "--op=layernorm", "--in=" + dir_->File("v.npy"),
                          "--grad=" + dir_->File("vdy.npy"), "--mean=" + dir_->File("vm.npy"),
                          "--rstd=" + dir_->File("vr.npy"), "--dx_out=" + dir_->File("vdx.npy")}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  double dy_mean = 0, dy_xhat_mean = 0;
  for (int i = 0; i < kHidden; ++i) {
    dy_mean += dy[i] / double{kHidden};
    dy_xhat_mean += dy[i] * (x[i] - mean) * rstd / kHidden;
  }
  const client::NpyArray dx = Load(dir_->File("vdx.npy"));
  ASSERT_EQ(dx.data.size(), 4u * kHidden);
  for (int i = 0; i < kHidden; ++i) {
    const double want = (dy[i] - dy_mean - (x[i] - mean) * rstd * dy_xhat_mean) * rstd;
    EXPECT_NEAR(Float(dx, i), want, 1e-4 * std::max(1.0, std::fabs(want))) << i;
  }
}

// No rows: the stream answers as Normalize does, an empty [0, H] output.
TEST_F(NormctlServerTest, StreamWithNoRowsWritesAnEmptyOutput) {
  client::NpyArray empty;
  empty.dtype = client::NpyDType::kFloat16;
  empty.shape = {0, 32};
  ASSERT_TRUE(client::WriteNpyFile(dir_->File("e.npy"), empty).ok());
  for (const char* transport : {"--stream=false", "--stream"}) {
    SCOPED_TRACE(transport);
    std::remove(dir_->File("ey.npy").c_str());
    const CommandResult run =
        RunCommand(Normctl({"normalize", "--op=rmsnorm", "--in=" + dir_->File("e.npy"), transport,
                            "--out_dtype=fp32", "--out=" + dir_->File("ey.npy")}));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const client::NpyArray y = Load(dir_->File("ey.npy"));
    EXPECT_EQ(y.dtype, client::NpyDType::kFloat32);
    EXPECT_EQ(y.shape, (std::vector<int64_t>{0, 32}));
  }
}

// Combinations the server cannot answer are usage errors (exit 2) found
// before the call: no request reaches the server and no file is written.
TEST_F(NormctlServerTest, ImpossibleOutputsAreRefusedBeforeTheCall) {
  WriteRandomNpy(dir_->File("x.npy"), {4, 32}, rng_);
  WriteRandomNpy(dir_->File("dy.npy"), {4, 32}, rng_);
  WriteRandomNpy(dir_->File("rt.npy"), {32, 4}, rng_);  // x's bytes, not its shape
  const double calls = Calls();
  const std::string y = dir_->File("never.npy");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"normalize", "--op=rmsnorm", "--mean_out=" + y},
        {"normalize", "--op=layernorm", "--chunk_rows=2"},
        {"normalize", "--op=layernorm", "--stream", "false"},
        {"normalize", "--op=layernorm", "extra"},
        {"normalize", "--op=layernorm", "--timeout_ms=0"},
        {"normalize", "--op=layernorm", "--timeout_ms=-5"},
        {"normalize", "--op=layernorm", "--stream", "--residual=" + dir_->File("rt.npy")},
        {"backward", "--op=rmsnorm", "--grad=" + dir_->File("dy.npy"), "--dx_out=" + y,
         "--dbeta_out=" + y}}) {
    std::remove(y.c_str());
    args.push_back("--in=" + dir_->File("x.npy"));
    if (args[0] == "normalize") args.push_back("--out=" + y);
    const CommandResult run = RunCommand(Normctl(args));
    EXPECT_EQ(run.exit_code, 2) << args[2] << " " << args.back() << ": " << run.err;
    EXPECT_FALSE(std::ifstream(y).good()) << args[2];
  }
  EXPECT_EQ(Calls(), calls);
}

// An output that cannot be written (its directory does not exist) fails the
// command with no output left behind, not the files before it.
TEST_F(NormctlServerTest, AnOutputThatCannotBeWrittenLeavesNoneBehind) {
  WriteRandomNpy(dir_->File("w.npy"), {3, 40}, rng_);
  const std::string y = dir_->File("wy.npy");
  std::remove(y.c_str());
  const CommandResult run =
      RunCommand(Normctl({"normalize", "--op=layernorm", "--in=" + dir_->File("w.npy"),
                          "--out=" + y, "--mean_out=" + dir_->File("no-such-dir/wm.npy")}));
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_NE(run.err.find("no output was written"), std::string::npos) << run.err;
  EXPECT_FALSE(std::ifstream(y).good());
  // Nor a temporary file beside it.
  for (const auto& entry : std::filesystem::directory_iterator(dir_->File(""))) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

// --help: "--tls (also implied by any --tls_* file flag)". A key file alone
// asks for TLS, which needs the certificate too: a usage error, not a
// plaintext call.
// grpc.health.v1 per service: the server's own service is SERVING (exit 0);
// one it does not know is its answer too, not a rejected call (exit 6).
TEST_F(NormctlServerTest, HealthOfAnUnknownServiceIsNotServing) {
  CommandResult run = RunCommand(Normctl({"health", "--service=normsvc.v1.Normalizer"}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "SERVING\n");
  run = RunCommand(Normctl({"health", "--service=no.such.Service"}));
  EXPECT_EQ(run.exit_code, 6) << run.out << run.err;
  EXPECT_EQ(run.out, "SERVICE_UNKNOWN\n");
}

TEST_F(NormctlServerTest, TlsKeyFileAloneImpliesTls) {
  WriteRandomNpy(dir_->File("key.pem"), {4}, rng_);
  const CommandResult run =
      RunCommand(Normctl({"info", "--tls_key_file=" + dir_->File("key.pem")}));
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("certificate"), std::string::npos) << run.err;
  EXPECT_EQ(RunCommand(Normctl({"info"})).exit_code, 0);
}

}  // namespace
}  // namespace normsvc::testing
