// normload's response checks: reductions over rows are bounded by their own
// scale (a row left out is caught however many rows there are), and every
// tensor's shape is checked.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "normsvc/client/tensor.h"
#include "verify.h"
#include "workload.h"

namespace normsvc::normload {
namespace {

PreparedKind PrepareOne(const std::string& spec) {
  WorkloadOptions options;
  options.variants = 1;
  options.verify = true;
  options.seed = std::random_device{}();
  absl::StatusOr<std::vector<PreparedKind>> prepared = PrepareWorkload({*ParseKind(spec)}, options);
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  return (*prepared)[0];
}

// LayerNorm backward over many rows: grad_gamma and grad_beta computed here
// in double (and once more as fp32 sums in row order, as a server may) pass;
// the same sums without one row fail, although that row moves no column by
// more than the old 1e-3 x rows bound.
TEST(VerifyTest, BackwardSumsMissingOneRowFail) {
  constexpr int64_t kRows = 4096, kHidden = 16;
  const PreparedKind entry = PrepareOne(
      "method=backward,op=layernorm,dtype=fp32,rows=4096,hidden=16,params=inline,eps=1e-5");
  const Variant& variant = entry.variants[0];
  const std::vector<double> x = *client::TensorToDoubles(variant.backward.input());
  const std::vector<double> dy = *client::TensorToDoubles(variant.backward.grad_output());
  // Per row and column, the terms dy * xhat (grad_gamma) and dy (grad_beta).
  std::vector<double> term(kRows * kHidden);
  for (int64_t row = 0; row < kRows; ++row) {
    double mean = 0, square = 0;
    for (int64_t i = 0; i < kHidden; ++i) mean += x[row * kHidden + i] / kHidden;
    for (int64_t i = 0; i < kHidden; ++i) {
      const double d = x[row * kHidden + i] - mean;
      square += d * d / kHidden;
    }
    const double rstd = 1.0 / std::sqrt(square + static_cast<double>(1e-5f));
    for (int64_t i = 0; i < kHidden; ++i) {
      term[row * kHidden + i] = dy[row * kHidden + i] * (x[row * kHidden + i] - mean) * rstd;
    }
  }
  // The row to leave out: its largest term near 1.5, well inside the old
  // bound (1e-3 x 4096 = 4.1) and far outside a scale-aware one.
  int64_t dropped = -1;
  double best = 1e9;
  for (int64_t row = 0; row < kRows; ++row) {
    double largest = 0, largest_dy = 0;
    for (int64_t i = 0; i < kHidden; ++i) {
      largest = std::max(largest, std::fabs(term[row * kHidden + i]));
      largest_dy = std::max(largest_dy, std::fabs(dy[row * kHidden + i]));
    }
    if (largest_dy < 3.5 && std::fabs(largest - 1.5) < best) {
      best = std::fabs(largest - 1.5);
      dropped = row;
    }
  }
  ASSERT_GE(dropped, 0);
  ASSERT_LT(best, 0.2);

  auto response = [&](int64_t skip, bool in_float) {
    std::vector<double> gamma(kHidden, 0.0), beta(kHidden, 0.0);
    std::vector<float> gamma_f(kHidden, 0.0f), beta_f(kHidden, 0.0f);
    for (int64_t row = 0; row < kRows; ++row) {
      if (row == skip) continue;
      for (int64_t i = 0; i < kHidden; ++i) {
        gamma[i] += term[row * kHidden + i];
        beta[i] += dy[row * kHidden + i];
        gamma_f[i] += static_cast<float>(term[row * kHidden + i]);
        beta_f[i] += static_cast<float>(dy[row * kHidden + i]);
      }
    }
    std::vector<float> g(kHidden), b(kHidden);
    for (int64_t i = 0; i < kHidden; ++i) {
      g[i] = in_float ? gamma_f[i] : static_cast<float>(gamma[i]);
      b[i] = in_float ? beta_f[i] : static_cast<float>(beta[i]);
    }
    v1::NormalizeBackwardResponse r;
    const std::vector<int64_t> shape = {kRows, kHidden}, columns = {kHidden};
    *r.mutable_grad_input() =
        *client::MakeTensorFromFloats(v1::FP32, shape, variant.expected.output);
    *r.mutable_grad_gamma() = *client::MakeTensorFromFloats(v1::FP32, columns, g);
    *r.mutable_grad_beta() = *client::MakeTensorFromFloats(v1::FP32, columns, b);
    return r;
  };
  EXPECT_EQ(CheckBackwardResponse(entry, variant, response(-1, false)), "");
  EXPECT_EQ(CheckBackwardResponse(entry, variant, response(-1, true)), "");
  const std::string missing = CheckBackwardResponse(entry, variant, response(dropped, false));
  EXPECT_NE(missing.find("grad_gamma["), std::string::npos) << "row " << dropped << ": " << missing;
}

// Right dtype and bytes but the wrong shape: refused.
TEST(VerifyTest, ResponseShapesAreChecked) {
  const PreparedKind entry =
      PrepareOne("op=rmsnorm,dtype=fp32,rows=4,hidden=48,params=inline,stats=1");
  const Variant& variant = entry.variants[0];
  const std::vector<int64_t> shape = {4, 48}, rows = {4};
  v1::NormalizeResponse good;
  *good.mutable_output() = *client::MakeTensorFromFloats(v1::FP32, shape, variant.expected.output);
  *good.mutable_rstd() = *client::MakeTensorFromFloats(v1::FP32, rows, variant.expected.rstd);
  ASSERT_EQ(CheckForwardResponse(entry, variant, good, false), "");

  v1::NormalizeResponse transposed = good;
  transposed.mutable_output()->set_shape(0, 48);
  transposed.mutable_output()->set_shape(1, 4);
  EXPECT_NE(CheckForwardResponse(entry, variant, transposed, false).find("output: shape [48, 4]"),
            std::string::npos);
  v1::NormalizeResponse flat = good;
  flat.mutable_output()->clear_shape();
  flat.mutable_output()->add_shape(4 * 48);
  EXPECT_NE(CheckForwardResponse(entry, variant, flat, false).find("shape"), std::string::npos);
  v1::NormalizeResponse column = good;
  column.mutable_rstd()->add_shape(1);  // [4, 1]
  EXPECT_NE(CheckForwardResponse(entry, variant, column, false).find("rstd: shape [4, 1]"),
            std::string::npos);

  // Echo mode: the input's bytes under another shape are refused too.
  const PreparedKind echo_entry = PrepareOne("op=layernorm,dtype=fp16,rows=3,hidden=8");
  v1::NormalizeResponse echo;
  *echo.mutable_output() = echo_entry.variants[0].forward.input();
  ASSERT_EQ(CheckForwardResponse(echo_entry, echo_entry.variants[0], echo, true), "");
  echo.mutable_output()->set_shape(0, 8);
  echo.mutable_output()->set_shape(1, 3);
  EXPECT_NE(CheckForwardResponse(echo_entry, echo_entry.variants[0], echo, true), "");
}

}  // namespace
}  // namespace normsvc::normload
