#include "normsvc/kernels/reference.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "normsvc/kernels/float16.h"
#include "reference_chunks.h"

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

// The backward's epsilon is checked on its own: every other argument is valid.
TEST(Reference, BackwardRejectsBadEpsilon) {
  std::vector<float> x = {1, 2}, dy = {0.5f, -1}, dx(2, kPoison), dgamma(2, kPoison);
  BackwardArgs a;
  a.rows = 1;
  a.hidden = 2;
  a.x = x.data();
  a.x_row_stride = 2;
  a.dy = dy.data();
  a.dy_row_stride = 2;
  a.dx = dx.data();
  a.dx_row_stride = 2;
  a.dgamma = dgamma.data();
  ASSERT_TRUE(ReferenceBackward(a).ok());
  for (float eps : {0.0f, -1e-5f, NAN, INFINITY}) {
    a.epsilon = eps;
    const Status st = ReferenceBackward(a);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << eps;
    EXPECT_NE(st.message().find("epsilon"), std::string::npos) << st.message();
  }
}

// A pointer off its element boundary is refused (the device would fault on
// it), naming the argument; the same arguments aligned pass.
TEST(Reference, RejectsPointersOffTheirElementBoundary) {
  alignas(16) unsigned char bytes[256] = {};
  auto at = [&](int offset) { return static_cast<void*>(bytes + offset); };
  ForwardSegment s;
  s.rows = 1;
  s.hidden = 2;
  s.x_dtype = s.out_dtype = s.param_dtype = DType::kF32;
  s.x = at(0);
  s.x_row_stride = 2;
  s.out = at(16);
  s.out_row_stride = 2;
  s.gamma = at(32);
  s.rstd = static_cast<float*>(at(48));
  ASSERT_TRUE(ValidateForwardSegment(s).ok());
  ForwardSegment bad = s;
  bad.x = at(2);
  EXPECT_NE(ValidateForwardSegment(bad).message().find("x is not aligned to its 4-byte"),
            std::string::npos);
  bad = s;
  bad.gamma = at(33);
  EXPECT_NE(ValidateForwardSegment(bad).message().find("gamma"), std::string::npos);
  bad = s;
  bad.rstd = reinterpret_cast<float*>(bytes + 50);
  EXPECT_NE(ValidateForwardSegment(bad).message().find("rstd"), std::string::npos);
  bad = s;  // 16-bit tensors need 2-byte alignment only
  bad.x_dtype = bad.out_dtype = DType::kBF16;
  bad.x = at(2);
  bad.out = at(18);
  EXPECT_TRUE(ValidateForwardSegment(bad).ok());
  bad.out = at(19);
  EXPECT_EQ(ValidateForwardSegment(bad).code(), Code::kInvalidArgument);

  BackwardArgs a;
  a.rows = 1;
  a.hidden = 2;
  a.x = at(0);
  a.x_row_stride = 2;
  a.dy = at(16);
  a.dy_row_stride = 2;
  a.dx = at(32);
  a.dx_row_stride = 2;
  a.dgamma = static_cast<float*>(at(48));
  ASSERT_TRUE(ValidateBackwardArgs(a).ok());
  BackwardArgs bad_backward = a;
  bad_backward.dy = at(17);
  EXPECT_NE(ValidateBackwardArgs(bad_backward).message().find("dy"), std::string::npos);
  bad_backward = a;
  bad_backward.dgamma = reinterpret_cast<float*>(bytes + 49);
  EXPECT_NE(ValidateBackwardArgs(bad_backward).message().find("dgamma"), std::string::npos);
}

// The CPU backend's dgamma/dbeta have the same bits on every host: the rows'
// split into chunks follows the shape, not the thread count.
TEST(Reference, BackwardBitsDoNotDependOnTheThreadCount) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> dist(0.3f, 1.7f);
  const int64_t rows = 1500, h = 700;  // 16 chunks of 94 rows (the last 90)
  ASSERT_EQ(detail::BackwardChunkRows(rows, h), 94);
  std::vector<float> x(rows * h), dy(rows * h), gamma(h);
  for (float& v : x) v = dist(rng);
  for (float& v : dy) v = dist(rng);
  for (float& v : gamma) v = dist(rng);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3, 7, 0}) {
    std::vector<float> dx(rows * h, kPoison), dgamma(h, kPoison), dbeta(h, kPoison);
    BackwardArgs a;
    a.rows = rows;
    a.hidden = h;
    a.x = x.data();
    a.x_row_stride = h;
    a.dy = dy.data();
    a.dy_row_stride = h;
    a.gamma = gamma.data();
    a.dx = dx.data();
    a.dx_row_stride = h;
    a.dgamma = dgamma.data();
    a.dbeta = dbeta.data();
    ASSERT_TRUE(ReferenceBackward(a, ReferenceOptions{threads}).ok());
    for (float v : dgamma) ASSERT_NE(v, kPoison);
    dgamma.insert(dgamma.end(), dbeta.begin(), dbeta.end());
    dgamma.insert(dgamma.end(), dx.begin(), dx.end());
    results.push_back(std::move(dgamma));
  }
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(std::memcmp(results[i].data(), results[0].data(), results[0].size() * sizeof(float)),
              0)
        << "threads case " << i;
  }
}

TEST(Reference, BackwardChunksFollowTheShapeWithinTheirBounds) {
  EXPECT_EQ(detail::BackwardChunkRows(0, 64), 1);
  EXPECT_EQ(detail::BackwardChunkRows(7, 64), 7);              // one chunk below 2^16 elements
  EXPECT_EQ(detail::BackwardChunkRows(1 << 20, 1024), 16384);  // at most 64 chunks
  EXPECT_EQ(detail::BackwardChunkRows(256, 262144), 16);       // 2^22 partial doubles: 16 chunks
  EXPECT_EQ(detail::BackwardChunkRows(3, 1 << 20), 1);         // a row a chunk is the least
}

}  // namespace
}  // namespace normsvc::kernels
