#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "normsvc/client/tensor.h"
#include "normsvc/kernels/reference.h"
#include "verify.h"
#include "workload.h"

namespace normsvc::normload {
namespace {

TEST(WorkloadTest, ParsesMixes) {
  absl::StatusOr<std::vector<RequestKind>> kinds = ParseMix(
      "op=rmsnorm,dtype=bf16,rows=16,hidden=2048,params=registered,weight=3;"
      "method=backward,op=layernorm,dtype=fp16,rows=2,hidden=64,params=none");
  ASSERT_TRUE(kinds.ok()) << kinds.status();
  ASSERT_EQ(kinds->size(), 2u);
  EXPECT_EQ((*kinds)[0].op, v1::RMS_NORM);
  EXPECT_EQ((*kinds)[0].dtype, v1::BF16);
  EXPECT_EQ((*kinds)[0].rows, 16);
  EXPECT_EQ((*kinds)[0].params, ParamsMode::kRegistered);
  EXPECT_EQ((*kinds)[0].weight, 3.0);
  EXPECT_EQ((*kinds)[1].method, Method::kBackward);
  EXPECT_EQ((*kinds)[1].params, ParamsMode::kNone);
  // DescribeKind writes what ParseKind reads.
  absl::StatusOr<RequestKind> again = ParseKind(DescribeKind((*kinds)[0]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(DescribeKind(*again), DescribeKind((*kinds)[0]));
}

TEST(WorkloadTest, ReadsScenarioFiles) {
  const std::string path = ::testing::TempDir() + "/scenario.txt";
  std::ofstream(path) << "# decode traffic\n"
                         "op=rmsnorm,dtype=bf16,rows=1,hidden=4096,params=registered,weight=9\n"
                         "\n"
                         "op=layernorm,rows=512,hidden=1024,transport=stream  # prefill\n";
  absl::StatusOr<std::vector<RequestKind>> kinds = ReadScenarioFile(path);
  ASSERT_TRUE(kinds.ok()) << kinds.status();
  ASSERT_EQ(kinds->size(), 2u);
  EXPECT_EQ((*kinds)[0].weight, 9.0);
  EXPECT_EQ((*kinds)[1].rows, 512);
  EXPECT_EQ((*kinds)[1].transport, Transport::kStream);
  std::ofstream(path) << "op=rmsnorm\nrows=-3\n";
  absl::StatusOr<std::vector<RequestKind>> bad = ReadScenarioFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(":2:"), std::string::npos) << bad.status();
}

TEST(WorkloadTest, RejectsBadMixes) {
  for (const char* bad : {"op=groupnorm", "rows=0", "hidden=x", "dtype=int8", "weight=-1",
                          "method=backward,transport=stream", "colour=blue", "rows", ""}) {
    EXPECT_FALSE(ParseMix(bad).ok()) << bad;
  }
}

// The verifier accepts an answer computed independently in double and
// rejects one with a single element off by more than the tolerance.
TEST(WorkloadTest, VerifierAcceptsReferenceAndRejectsCorruption) {
  RequestKind kind =
      *ParseKind("op=layernorm,dtype=fp32,rows=3,hidden=96,params=inline,residual=1,stats=1");
  WorkloadOptions options;
  options.variants = 1;
  options.verify = true;
  options.seed = std::random_device{}();
  absl::StatusOr<std::vector<PreparedKind>> prepared = PrepareWorkload({kind}, options);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const PreparedKind& entry = (*prepared)[0];
  const v1::NormalizeRequest& request = entry.variants[0].forward;
  std::vector<double> x = *client::TensorToDoubles(request.input());
  std::vector<double> r = *client::TensorToDoubles(request.residual());
  std::vector<double> gamma = *client::TensorToDoubles(request.parameters().inline_().gamma());
  std::vector<double> beta = *client::TensorToDoubles(request.parameters().inline_().beta());
  std::vector<float> y, sum, mean, rstd;
  for (int row = 0; row < 3; ++row) {
    // Residual sums are rounded to fp32 before normalizing (types.h).
    std::vector<double> v(96);
    for (int i = 0; i < 96; ++i) v[i] = static_cast<float>(x[row * 96 + i] + r[row * 96 + i]);
    kernels::RowResult result = kernels::ReferenceForwardRow(
        kernels::NormOp::kLayerNorm, v.data(), nullptr, gamma.data(), beta.data(), 96, 1e-5);
    for (int i = 0; i < 96; ++i) {
      y.push_back(static_cast<float>(result.y[i]));
      sum.push_back(static_cast<float>(v[i]));
    }
    mean.push_back(static_cast<float>(result.mean));
    rstd.push_back(static_cast<float>(result.rstd));
  }
  v1::NormalizeResponse response;
  const std::vector<int64_t> shape = {3, 96}, rows = {3};
  *response.mutable_output() = *client::MakeTensorFromFloats(v1::FP32, shape, y);
  *response.mutable_residual_sum() = *client::MakeTensorFromFloats(v1::FP32, shape, sum);
  *response.mutable_mean() = *client::MakeTensorFromFloats(v1::FP32, rows, mean);
  *response.mutable_rstd() = *client::MakeTensorFromFloats(v1::FP32, rows, rstd);
  EXPECT_EQ(CheckForwardResponse(entry, entry.variants[0], response, false), "");

  y[100] += 0.01f;
  *response.mutable_output() = *client::MakeTensorFromFloats(v1::FP32, shape, y);
  EXPECT_NE(CheckForwardResponse(entry, entry.variants[0], response, false).find("output[100]"),
            std::string::npos);
  // Echo mode compares the output bytes with the input bytes.
  *response.mutable_output() = request.input();
  EXPECT_EQ(CheckForwardResponse(entry, entry.variants[0], response, true), "");
  response.mutable_output()->mutable_data()->at(5) ^= 1;
  EXPECT_NE(CheckForwardResponse(entry, entry.variants[0], response, true), "");
}

}  // namespace
}  // namespace normsvc::normload
