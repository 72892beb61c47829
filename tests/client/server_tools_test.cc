// normctl and normload against a CPU-backend normsvc started on loopback:
// outputs checked against independent double-precision computations, and
// normload's counts against the server's own normsvc_requests_total.
#include <cmath>

#include "normsvc/client/client.h"
#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/reference.h"
#include "normsvc_server.h"
#include "tool_runner.h"

namespace normsvc::testing {
namespace {

class ServerToolsTest : public ServerSuiteTest<ServerToolsTest> {
 protected:
  static std::string Target() { return server_->target(); }
  static double RequestsTotal(const std::string& labels) {
    return server_->RequestsTotal({labels});
  }
};

std::vector<double> Load(const std::string& path, std::vector<int64_t>* shape = nullptr) {
  absl::StatusOr<client::NpyArray> array = client::ReadNpyFile(path);
  EXPECT_TRUE(array.ok()) << array.status();
  if (!array.ok()) return {};
  if (shape != nullptr) *shape = array->shape;
  const kernels::DType dtype = array->dtype == client::NpyDType::kFloat16    ? kernels::DType::kF16
                               : array->dtype == client::NpyDType::kBFloat16 ? kernels::DType::kBF16
                                                                             : kernels::DType::kF32;
  std::vector<double> values(array->data.size() / kernels::DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = kernels::LoadAsFloat(array->data.data(), dtype, static_cast<int64_t>(i));
  }
  return values;
}

float RoundTo(kernels::DType dtype, float value) {
  if (dtype == kernels::DType::kF16)
    return kernels::HalfBitsToFloat(kernels::FloatToHalfBits(value));
  if (dtype == kernels::DType::kBF16)
    return kernels::Bf16BitsToFloat(kernels::FloatToBf16Bits(value));
  return value;
}

TEST_F(ServerToolsTest, NormctlForwardMatchesTheDoubleReference) {
  constexpr int64_t kRows = 6, kHidden = 200;
  struct Case {
    const char* op;
    const char* dtype;
    kernels::DType kernel_dtype;
    double tolerance;  // relative to max(1, |y|): one rounding of the output
  };
  for (const Case& c : {Case{"layernorm", "fp32", kernels::DType::kF32, 2e-6},
                        Case{"rmsnorm", "fp16", kernels::DType::kF16, 2e-3},
                        Case{"layernorm", "bf16", kernels::DType::kBF16, 1.6e-2}}) {
    SCOPED_TRACE(std::string(c.op) + " " + c.dtype);
    const std::vector<float> x = WriteRandomNpy(dir_->File("x.npy"), {2, kRows / 2, kHidden}, rng_);
    const std::vector<float> r =
        WriteRandomNpy(dir_->File("r.npy"), {2, kRows / 2, kHidden}, rng_, 0, 0.5);
    const std::vector<float> g = WriteRandomNpy(dir_->File("g.npy"), {kHidden}, rng_, 1.0, 0.3);
    const std::vector<float> b = WriteRandomNpy(dir_->File("b.npy"), {kHidden}, rng_, 0.0, 0.3);
    std::vector<std::string> args = Normctl(
        {"normalize", std::string("--op=") + c.op, "--in=" + dir_->File("x.npy"),
         "--residual=" + dir_->File("r.npy"), "--gamma=" + dir_->File("g.npy"),
         "--out=" + dir_->File("y.npy"), "--residual_sum_out=" + dir_->File("s.npy"),
         "--rstd_out=" + dir_->File("rstd.npy"), std::string("--dtype=") + c.dtype, "--eps=1e-4"});
    if (std::string(c.op) == "layernorm") args.push_back("--beta=" + dir_->File("b.npy"));
    const CommandResult run = RunCommand(args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    std::vector<int64_t> shape;
    const std::vector<double> y = Load(dir_->File("y.npy"), &shape);
    const std::vector<double> sum = Load(dir_->File("s.npy"));
    const std::vector<double> rstd = Load(dir_->File("rstd.npy"));
    ASSERT_EQ(shape, (std::vector<int64_t>{2, kRows / 2, kHidden}));
    ASSERT_EQ(y.size(), x.size());
    ASSERT_EQ(rstd.size(), static_cast<size_t>(kRows));
    const bool layer = std::string(c.op) == "layernorm";
    for (int64_t row = 0; row < kRows; ++row) {
      // Independent computation: inputs as sent (rounded to the dtype), the
      // sum rounded to the dtype, then the normalization in double.
      std::vector<double> v(kHidden), gamma(kHidden), beta(kHidden);
      for (int64_t i = 0; i < kHidden; ++i) {
        const float xi = RoundTo(c.kernel_dtype, x[row * kHidden + i]);
        const float ri = RoundTo(c.kernel_dtype, r[row * kHidden + i]);
        v[i] = RoundTo(c.kernel_dtype, xi + ri);
        gamma[i] = g[i];  // gamma/beta files are fp32 and sent as fp32
        beta[i] = b[i];
      }
      double mean = 0, square = 0;
      for (double value : v) mean += value / kHidden;
      for (double value : v)
        square += (layer ? (value - mean) * (value - mean) : value * value) / kHidden;
      const double inv = 1.0 / std::sqrt(square + 1e-4);
      ASSERT_NEAR(rstd[row], inv, 1e-5 * inv) << "row " << row;
      for (int64_t i = 0; i < kHidden; ++i) {
        const double want =
            ((layer ? v[i] - mean : v[i]) * inv) * gamma[i] + (layer ? beta[i] : 0.0);
        ASSERT_NEAR(y[row * kHidden + i], want, c.tolerance * std::max(1.0, std::fabs(want)))
            << "row " << row << " element " << i;
        ASSERT_EQ(sum[row * kHidden + i], v[i]);
      }
    }
  }
}

TEST_F(ServerToolsTest, NormctlBackwardMatchesTheDoubleReference) {
  constexpr int64_t kRows = 5, kHidden = 96;
  const std::vector<float> x = WriteRandomNpy(dir_->File("bx.npy"), {kRows, kHidden}, rng_);
  const std::vector<float> dy = WriteRandomNpy(dir_->File("bdy.npy"), {kRows, kHidden}, rng_, 0, 1);
  const std::vector<float> g = WriteRandomNpy(dir_->File("bg.npy"), {kHidden}, rng_, 1.0, 0.3);
  for (const char* op : {"layernorm", "rmsnorm"}) {
    SCOPED_TRACE(op);
    const bool layer = std::string(op) == "layernorm";
    const CommandResult run = RunCommand(
        Normctl({"backward", std::string("--op=") + op, "--in=" + dir_->File("bx.npy"),
                 "--grad=" + dir_->File("bdy.npy"), "--gamma=" + dir_->File("bg.npy"),
                 "--dx_out=" + dir_->File("dx.npy"), "--dgamma_out=" + dir_->File("dg.npy")}));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const std::vector<double> dx = Load(dir_->File("dx.npy"));
    const std::vector<double> dgamma = Load(dir_->File("dg.npy"));
    ASSERT_EQ(dx.size(), x.size());
    ASSERT_EQ(dgamma.size(), static_cast<size_t>(kHidden));
    std::vector<double> want_dgamma(kHidden, 0.0);
    for (int64_t row = 0; row < kRows; ++row) {
      const float* xr = &x[row * kHidden];
      const float* dyr = &dy[row * kHidden];
      double mean = 0, square = 0;
      for (int64_t i = 0; i < kHidden; ++i) mean += double(xr[i]) / kHidden;
      if (!layer) mean = 0;
      for (int64_t i = 0; i < kHidden; ++i) square += (xr[i] - mean) * (xr[i] - mean) / kHidden;
      const double rstd = 1.0 / std::sqrt(square + 1e-5);
      double mean_g = 0, mean_gx = 0;
      for (int64_t i = 0; i < kHidden; ++i) {
        const double xhat = (xr[i] - mean) * rstd, gi = double(dyr[i]) * g[i];
        mean_g += gi / kHidden;
        mean_gx += gi * xhat / kHidden;
        want_dgamma[i] += double(dyr[i]) * xhat;
      }
      for (int64_t i = 0; i < kHidden; ++i) {
        const double xhat = (xr[i] - mean) * rstd, gi = double(dyr[i]) * g[i];
        const double want = rstd * (gi - (layer ? mean_g : 0.0) - xhat * mean_gx);
        ASSERT_NEAR(dx[row * kHidden + i], want, 1e-5 * std::max(1.0, std::fabs(want)));
      }
    }
    for (int64_t i = 0; i < kHidden; ++i) {
      ASSERT_NEAR(dgamma[i], want_dgamma[i], 1e-5 * std::max(1.0, std::fabs(want_dgamma[i])));
    }
  }
}

TEST_F(ServerToolsTest, NormctlParamsLifecycleAndServerErrors) {
  const std::string name = "normctl-test-" + std::to_string(rng_() % 100000);
  const std::vector<float> g = WriteRandomNpy(dir_->File("pg.npy"), {64}, rng_, 1.0, 0.3);
  const std::vector<float> x = WriteRandomNpy(dir_->File("px.npy"), {3, 64}, rng_);
  WriteRandomNpy(dir_->File("wrong.npy"), {65}, rng_);
  CommandResult run = RunCommand(
      Normctl({"params", "register", "--name=" + name, "--gamma=" + dir_->File("pg.npy")}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  run = RunCommand(Normctl({"params", "list"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find(name), std::string::npos) << run.out;
  run = RunCommand(
      Normctl({"params", "register", "--name=" + name, "--gamma=" + dir_->File("pg.npy")}));
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_NE(run.err.find("ALREADY_EXISTS"), std::string::npos) << run.err;
  // By name and inline give the same bits.
  run = RunCommand(Normctl({"normalize", "--op=rmsnorm", "--in=" + dir_->File("px.npy"),
                            "--params=" + name, "--out=" + dir_->File("by_name.npy")}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  run =
      RunCommand(Normctl({"normalize", "--op=rmsnorm", "--in=" + dir_->File("px.npy"),
                          "--gamma=" + dir_->File("pg.npy"), "--out=" + dir_->File("inline.npy")}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ReadFile(dir_->File("by_name.npy")), ReadFile(dir_->File("inline.npy")));
  // Errors carry the code name and the server's message.
  run = RunCommand(Normctl({"normalize", "--op=rmsnorm", "--in=" + dir_->File("px.npy"),
                            "--gamma=" + dir_->File("wrong.npy"), "--out=" + dir_->File("y.npy")}));
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_NE(run.err.find("INVALID_ARGUMENT"), std::string::npos) << run.err;
  run = RunCommand(Normctl({"params", "delete", "--name=" + name}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  run = RunCommand(Normctl({"normalize", "--op=rmsnorm", "--in=" + dir_->File("px.npy"),
                            "--params=" + name, "--out=" + dir_->File("y.npy")}));
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_NE(run.err.find("NOT_FOUND"), std::string::npos) << run.err;
  run = RunCommand(Normctl({"info"}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("backend:    cpu"), std::string::npos) << run.out;
  run = RunCommand(Normctl({"health"}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

TEST_F(ServerToolsTest, NormloadCountsMatchTheServerMetrics) {
  const double normalize_before = RequestsTotal("method=\"Normalize\"");
  const double stream_before = RequestsTotal("method=\"NormalizeStream\"");
  const double backward_before = RequestsTotal("method=\"NormalizeBackward\"");
  CommandResult closed = RunCommand(
      {kNormload, "--target=" + Target(), "--concurrency=8", "--channels=2", "--warmup_s=0.3",
       "--duration_s=1", "--verify", "--quiet", "--json=" + dir_->File("closed.json"),
       "--mix=op=layernorm,dtype=fp32,rows=4,hidden=256,params=registered;"
       "op=rmsnorm,dtype=bf16,rows=2,hidden=512,residual=1,stats=1;"
       "method=backward,op=layernorm,dtype=fp16,rows=3,hidden=128,weight=0.5"});
  ASSERT_EQ(closed.exit_code, 0) << closed.err << closed.out;
  CommandResult open = RunCommand(
      {kNormload, "--target=" + Target(), "--rate=300", "--channels=2", "--warmup_s=0.3",
       "--duration_s=1", "--verify", "--quiet", "--json=" + dir_->File("open.json"),
       "--mix=op=layernorm,dtype=fp16,rows=3,hidden=128,transport=stream;rows=1,hidden=1024"});
  ASSERT_EQ(open.exit_code, 0) << open.err << open.out;
  const google::protobuf::Struct c = ParseJson(ReadFile(dir_->File("closed.json")));
  const google::protobuf::Struct o = ParseJson(ReadFile(dir_->File("open.json")));
  EXPECT_EQ(Field(c, "echo").bool_value(), false);
  EXPECT_EQ(Field(c, "server").struct_value().fields().at("backend").string_value(), "cpu");
  EXPECT_EQ(Number(c, {"totals", "errors"}) + Number(o, {"totals", "errors"}), 0)
      << Field(c, "first_error").string_value() << Field(o, "first_error").string_value();
  EXPECT_EQ(Number(c, {"measured", "verify_failures"}) + Number(o, {"measured", "verify_failures"}),
            0)
      << Field(c, "first_verify_failure").string_value();
  EXPECT_GT(Number(c, {"measured", "verified"}), 0);
  auto by_method = [](const google::protobuf::Struct& run, const char* method) {
    const double ok = Number(run, {"totals", "by_method", method, "ok"});
    return std::isnan(ok) ? 0.0 : ok;
  };
  EXPECT_EQ(RequestsTotal("method=\"Normalize\"") - normalize_before,
            by_method(c, "Normalize") + by_method(o, "Normalize"));
  EXPECT_EQ(RequestsTotal("method=\"NormalizeStream\"") - stream_before,
            by_method(o, "NormalizeStream"));
  EXPECT_EQ(RequestsTotal("method=\"NormalizeBackward\"") - backward_before,
            by_method(c, "NormalizeBackward"));
  EXPECT_GT(by_method(c, "NormalizeBackward"), 0);
  EXPECT_GT(by_method(o, "NormalizeStream"), 0);
}

}  // namespace
}  // namespace normsvc::testing
