#include "normsvc/kernels/reference.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "normsvc/kernels/float16.h"

namespace normsvc::kernels {
namespace {

constexpr float kPoison = 1234.5f;

// A row computed by hand: x = [1, 2, 3, 4], mean 2.5, var 1.25.
TEST(Reference, LayerNormMatchesHandComputedRow) {
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> gamma = {1, 2, 0.5f, -1};
  const std::vector<float> beta = {0, 1, 0, 2};
  std::vector<float> out(4, kPoison), mean(1, kPoison), rstd(1, kPoison);
  ForwardSegment s;
  s.op = NormOp::kLayerNorm;
  s.rows = 1;
  s.hidden = 4;
  s.epsilon = 1e-5f;
  s.x = x.data();
  s.x_row_stride = 4;
  s.gamma = gamma.data();
  s.beta = beta.data();
  s.out = out.data();
  s.out_row_stride = 4;
  s.mean = mean.data();
  s.rstd = rstd.data();
  ASSERT_TRUE(ReferenceForward(&s, 1).ok());
  const double r = 1.0 / std::sqrt(1.25 + 1e-5f);
  const double expected[4] = {-1.5 * r, -0.5 * r * 2 + 1, 0.5 * r * 0.5, -1.5 * r + 2};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], expected[i], 1e-6) << i;
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_NEAR(rstd[0], r, 1e-6);
}

// x = [3, 4], mean square 12.5: y = x / sqrt(12.5 + eps) * gamma.
TEST(Reference, RmsNormMatchesHandComputedRow) {
  const std::vector<float> x = {3, 4};
  const std::vector<float> gamma = {2, -1};
  std::vector<float> out(2, kPoison);
  ForwardSegment s;
  s.op = NormOp::kRmsNorm;
  s.rows = 1;
  s.hidden = 2;
  s.epsilon = 1e-6f;
  s.x = x.data();
  s.x_row_stride = 2;
  s.gamma = gamma.data();
  s.out = out.data();
  s.out_row_stride = 2;
  ASSERT_TRUE(ReferenceForward(&s, 1).ok());
  const double r = 1.0 / std::sqrt(12.5 + 1e-6f);
  EXPECT_NEAR(out[0], 6 * r, 1e-6);
  EXPECT_NEAR(out[1], -4 * r, 1e-6);
}

TEST(Reference, RejectsBadEpsilon) {
  std::vector<float> x = {1, 2}, out(2);
  ForwardSegment s;
  s.rows = 1;
  s.hidden = 2;
  s.x = x.data();
  s.x_row_stride = 2;
  s.out = out.data();
  s.out_row_stride = 2;
  for (float eps : {0.0f, -1e-5f, NAN, INFINITY}) {
    s.epsilon = eps;
    EXPECT_EQ(ReferenceForward(&s, 1).code(), Code::kInvalidArgument) << eps;
  }
}

// The backward pass against central finite differences of the forward pass
// (in double), on fresh random data.
TEST(Reference, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<double> dist(0.3, 1.7);
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    const int64_t h = 7;
    std::vector<double> x(h), gamma(h), dy(h);
    for (int64_t i = 0; i < h; ++i) {
      x[i] = dist(rng);
      gamma[i] = dist(rng);
      dy[i] = dist(rng);
    }
    std::vector<float> xf(x.begin(), x.end()), gf(gamma.begin(), gamma.end()),
        dyf(dy.begin(), dy.end()), dx(h, kPoison), dgamma(h, kPoison);
    for (int64_t i = 0; i < h; ++i) {  // the float inputs are what the pass sees
      x[i] = xf[i];
      gamma[i] = gf[i];
      dy[i] = dyf[i];
    }
    BackwardArgs a;
    a.op = op;
    a.rows = 1;
    a.hidden = h;
    a.epsilon = 1e-5f;
    a.x = xf.data();
    a.x_row_stride = h;
    a.dy = dyf.data();
    a.dy_row_stride = h;
    a.gamma = gf.data();
    a.dx = dx.data();
    a.dx_row_stride = h;
    a.dgamma = dgamma.data();
    ASSERT_TRUE(ReferenceBackward(a).ok());
    auto loss = [&](const std::vector<double>& xs) {
      const RowResult row = ReferenceForwardRow(op, xs.data(), nullptr, gamma.data(), nullptr, h,
                                                static_cast<double>(a.epsilon));
      double l = 0;
      for (int64_t i = 0; i < h; ++i) l += row.y[i] * dy[i];
      return l;
    };
    for (int64_t i = 0; i < h; ++i) {
      std::vector<double> plus = x, minus = x;
      plus[i] += 1e-6;
      minus[i] -= 1e-6;
      const double numeric = (loss(plus) - loss(minus)) / 2e-6;
      EXPECT_NEAR(dx[i], numeric, 1e-4 * (1 + std::fabs(numeric))) << NormOpName(op) << " " << i;
    }
    const RowResult row = ReferenceForwardRow(op, x.data(), nullptr, nullptr, nullptr, h,
                                              static_cast<double>(a.epsilon));
    for (int64_t i = 0; i < h; ++i) {
      EXPECT_NEAR(dgamma[i], dy[i] * row.y[i], 1e-5 * (1 + std::fabs(dy[i] * row.y[i])));
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels
