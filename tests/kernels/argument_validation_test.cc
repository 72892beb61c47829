// Every argument the launchers' shared validation refuses (types.h), case by
// case: ValidateForwardSegment / ValidateBackwardArgs name the offending
// argument, and the reference (the CPU backend) refuses the same call without
// writing anything. Also the bounds on a tensor's extent (kMaxTensorBytes)
// at their edge, and calls of zero rows. The GPU launchers run the same
// validation first (gpu_launch_validation_test.cc checks them).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "normsvc/kernels/reference.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels {
namespace {

constexpr int64_t kRows = 3;
constexpr int64_t kHidden = 8;
constexpr float kPoison = -7777.0f;

// Whether every element of the buffers still holds the poison, bit for bit.
bool AllPoison(std::initializer_list<const std::vector<float>*> buffers) {
  for (const std::vector<float>* buffer : buffers) {
    for (float e : *buffer) {
      if (std::memcmp(&e, &kPoison, sizeof e) != 0) return false;
    }
  }
  return true;
}

// Host buffers of a small valid LayerNorm call on fresh random data, the
// outputs poisoned.
struct ForwardBuffers {
  std::vector<float> x, residual, gamma, beta, out, residual_out, mean, rstd;

  explicit ForwardBuffers(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.5f, 2.0f);
    for (auto* v : {&x, &residual, &out, &residual_out}) v->resize(kRows * kHidden);
    for (auto* v : {&gamma, &beta}) v->resize(kHidden);
    for (auto* v : {&mean, &rstd}) v->resize(kRows);
    for (auto* v : {&x, &residual, &gamma, &beta}) {
      for (float& e : *v) e = normal(rng);
    }
    for (auto* v : {&out, &residual_out, &mean, &rstd}) v->assign(v->size(), kPoison);
  }

  ForwardSegment Segment() {
    ForwardSegment s;
    s.rows = kRows;
    s.hidden = kHidden;
    s.x = x.data();
    s.x_row_stride = kHidden;
    s.residual = residual.data();
    s.residual_row_stride = kHidden;
    s.residual_out = residual_out.data();
    s.residual_out_row_stride = kHidden;
    s.gamma = gamma.data();
    s.beta = beta.data();
    s.out = out.data();
    s.out_row_stride = kHidden;
    s.mean = mean.data();
    s.rstd = rstd.data();
    return s;
  }

  bool OutputsUntouched() const { return AllPoison({&out, &residual_out, &mean, &rstd}); }
};

struct ForwardCase {
  const char* name;
  std::function<void(ForwardSegment&)> spoil;
  const char* message;  // a part of the error message
};

TEST(ArgumentValidation, ForwardRefusalsNameTheArgumentAndWriteNothing) {
  const std::vector<ForwardCase> cases = {
      {"unknown op", [](ForwardSegment& s) { s.op = static_cast<NormOp>(7); }, "unknown op"},
      {"unknown dtype", [](ForwardSegment& s) { s.out_dtype = static_cast<DType>(9); },
       "unknown dtype"},
      {"hidden 0", [](ForwardSegment& s) { s.hidden = 0; }, "hidden size must be in [1, "},
      {"hidden past the limit",
       [](ForwardSegment& s) { s.hidden = s.x_row_stride = s.out_row_stride = kMaxHidden + 1; },
       "hidden size must be in [1, "},
      {"negative rows", [](ForwardSegment& s) { s.rows = -1; }, "rows must be >= 0"},
      {"no x", [](ForwardSegment& s) { s.x = nullptr; }, "x and out are required"},
      {"no out", [](ForwardSegment& s) { s.out = nullptr; }, "x and out are required"},
      {"x stride below H", [](ForwardSegment& s) { s.x_row_stride = kHidden - 1; },
       "x row stride 7 is smaller than the hidden size 8"},
      {"out stride below H", [](ForwardSegment& s) { s.out_row_stride = 1; },
       "out row stride 1 is smaller"},
      {"residual stride below H", [](ForwardSegment& s) { s.residual_row_stride = 0; },
       "residual row stride 0 is smaller"},
      {"residual_out stride below H", [](ForwardSegment& s) { s.residual_out_row_stride = 2; },
       "residual_out row stride 2 is smaller"},
      {"residual_out without residual", [](ForwardSegment& s) { s.residual = nullptr; },
       "residual_out requires residual"},
      {"RMSNorm with beta", [](ForwardSegment& s) { s.op = NormOp::kRmsNorm; },
       "RMSNorm takes no beta"},
      {"RMSNorm saving a mean",
       [](ForwardSegment& s) {
         s.op = NormOp::kRmsNorm;
         s.beta = nullptr;
       },
       "RMSNorm saves no mean"},
      {"parameters of a third dtype",
       [](ForwardSegment& s) {
         s.x_dtype = s.out_dtype = DType::kBF16;
         s.param_dtype = DType::kF16;
       },
       "gamma/beta dtype must be fp32 or the activation dtype"},
      {"epsilon NaN", [](ForwardSegment& s) { s.epsilon = NAN; }, "epsilon must be finite"},
      // Extents past kMaxTensorBytes: (rows - 1) x stride overflows int64_t
      // here, and would wrap to a small offset if it were formed.
      {"x stride past the extent bound",
       [](ForwardSegment& s) { s.x_row_stride = (int64_t{1} << 62) + 1; },
       "x: 3 rows of stride 4611686018427387905 span more than 281474976710656 bytes"},
      {"rows past the extent bound", [](ForwardSegment& s) { s.rows = int64_t{1} << 62; },
       "x: 4611686018427387904 rows of stride 8 span more than"},
      {"residual_out stride past the extent bound",
       [](ForwardSegment& s) { s.residual_out_row_stride = kMaxTensorBytes / 4; },
       "residual_out: 3 rows of stride"},
  };
  uint32_t seed = 20261207;
  for (const ForwardCase& c : cases) {
    SCOPED_TRACE(c.name);
    ForwardBuffers buffers(seed++);
    ForwardSegment s = buffers.Segment();
    ASSERT_TRUE(ValidateForwardSegment(s).ok());
    c.spoil(s);
    const Status validated = ValidateForwardSegment(s);
    EXPECT_EQ(validated.code(), Code::kInvalidArgument);
    EXPECT_NE(validated.message().find(c.message), std::string::npos) << validated.message();
    const Status computed = ReferenceForward(&s, 1);
    EXPECT_EQ(computed.code(), Code::kInvalidArgument);
    EXPECT_EQ(computed.message(), "segment 0: " + validated.message());
    EXPECT_TRUE(buffers.OutputsUntouched());
  }
}

// A bad segment anywhere refuses the whole call, and nothing is written for
// the good segments before it either.
TEST(ArgumentValidation, ABadSegmentRefusesTheWholeCall) {
  ForwardBuffers first(1), second(2);
  ForwardSegment segments[2] = {first.Segment(), second.Segment()};
  segments[1].epsilon = 0.0f;
  const Status st = ReferenceForward(segments, 2);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("segment 1: epsilon", 0), 0u) << st.message();
  EXPECT_TRUE(first.OutputsUntouched());
  EXPECT_TRUE(second.OutputsUntouched());
  EXPECT_EQ(ValidateForwardSegments(segments, -1).code(), Code::kInvalidArgument);
  EXPECT_EQ(ValidateForwardSegments(nullptr, 1).code(), Code::kInvalidArgument);
  EXPECT_TRUE(ValidateForwardSegments(nullptr, 0).ok());
}

// The extent bound at its edge, on descriptions only (nothing is computed on
// them): exactly kMaxTensorBytes passes, one row more does not; the elements
// of a call's segments together are bounded the same way.
TEST(ArgumentValidation, ExtentBoundAtItsEdge) {
  float dummy[2] = {1.0f, 2.0f};
  ForwardSegment s;
  s.hidden = 1;
  s.x = s.out = dummy;
  s.x_row_stride = s.out_row_stride = 1;
  s.rows = kMaxTensorBytes / 4;  // fp32: exactly kMaxTensorBytes
  EXPECT_TRUE(ValidateForwardSegment(s).ok());
  s.rows += 1;
  EXPECT_EQ(ValidateForwardSegment(s).code(), Code::kInvalidArgument);
  // Rows of stride 1000 whose last row ends exactly at the bound.
  s.hidden = 10;
  s.x_row_stride = s.out_row_stride = 1000;
  s.rows = (kMaxTensorBytes / 4 - 10) / 1000 + 1;
  EXPECT_TRUE(ValidateForwardSegment(s).ok());
  s.x_row_stride = 1001;
  EXPECT_EQ(ValidateForwardSegment(s).code(), Code::kInvalidArgument);

  // 16-bit: twice the elements in the same bytes. Two such segments (one
  // buffer described twice) hold kMaxTensorBytes elements together, three
  // more than that.
  ForwardSegment half;
  half.hidden = 1;
  half.x_dtype = half.out_dtype = half.param_dtype = DType::kBF16;
  half.x = half.out = dummy;
  half.x_row_stride = half.out_row_stride = 1;
  half.rows = kMaxTensorBytes / 2;
  ASSERT_TRUE(ValidateForwardSegment(half).ok());
  std::vector<ForwardSegment> many(2, half);
  EXPECT_TRUE(ValidateForwardSegments(many.data(), 2).ok());
  many.assign(3, half);
  const Status st = ValidateForwardSegments(many.data(), 3);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("together hold more than"), std::string::npos) << st.message();

  BackwardArgs a;
  a.hidden = 1;
  a.x = a.dy = a.dx = dummy;
  a.x_row_stride = a.dy_row_stride = a.dx_row_stride = 1;
  a.rows = kMaxTensorBytes / 4;
  EXPECT_TRUE(ValidateBackwardArgs(a).ok());
  a.dy_row_stride = 2;
  const Status backward = ValidateBackwardArgs(a);
  EXPECT_EQ(backward.code(), Code::kInvalidArgument);
  EXPECT_EQ(backward.message().rfind("dy: ", 0), 0u) << backward.message();
}

struct BackwardBuffers {
  std::vector<float> x, dy, gamma, dx, mean, rstd, dgamma, dbeta;

  explicit BackwardBuffers(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(-0.25f, 1.5f);
    for (auto* v : {&x, &dy, &dx}) v->resize(kRows * kHidden);
    for (auto* v : {&gamma, &dgamma, &dbeta}) v->resize(kHidden);
    for (auto* v : {&mean, &rstd}) v->resize(kRows);
    for (auto* v : {&x, &dy, &gamma, &mean}) {
      for (float& e : *v) e = normal(rng);
    }
    for (float& e : rstd) e = 0.5f + std::abs(normal(rng));
    for (auto* v : {&dx, &dgamma, &dbeta}) v->assign(v->size(), kPoison);
  }

  BackwardArgs Args() {
    BackwardArgs a;
    a.rows = kRows;
    a.hidden = kHidden;
    a.x = x.data();
    a.x_row_stride = kHidden;
    a.dy = dy.data();
    a.dy_row_stride = kHidden;
    a.gamma = gamma.data();
    a.mean = mean.data();
    a.rstd = rstd.data();
    a.dx = dx.data();
    a.dx_row_stride = kHidden;
    a.dgamma = dgamma.data();
    a.dbeta = dbeta.data();
    return a;
  }

  bool OutputsUntouched() const { return AllPoison({&dx, &dgamma, &dbeta}); }
};

struct BackwardCase {
  const char* name;
  std::function<void(BackwardArgs&)> spoil;
  const char* message;
};

TEST(ArgumentValidation, BackwardRefusalsNameTheArgumentAndWriteNothing) {
  const std::vector<BackwardCase> cases = {
      {"unknown op", [](BackwardArgs& a) { a.op = static_cast<NormOp>(3); }, "unknown op"},
      {"unknown dtype", [](BackwardArgs& a) { a.param_dtype = static_cast<DType>(5); },
       "unknown dtype"},
      {"hidden 0", [](BackwardArgs& a) { a.hidden = 0; }, "hidden size must be in [1, "},
      {"negative rows", [](BackwardArgs& a) { a.rows = -3; }, "rows must be >= 0"},
      {"no x", [](BackwardArgs& a) { a.x = nullptr; }, "x, dy and dx are required"},
      {"no dy", [](BackwardArgs& a) { a.dy = nullptr; }, "x, dy and dx are required"},
      {"no dx", [](BackwardArgs& a) { a.dx = nullptr; }, "x, dy and dx are required"},
      {"x stride below H", [](BackwardArgs& a) { a.x_row_stride = 4; },
       "x row stride 4 is smaller than the hidden size 8"},
      {"dy stride below H", [](BackwardArgs& a) { a.dy_row_stride = 7; },
       "dy row stride 7 is smaller"},
      {"dx stride below H", [](BackwardArgs& a) { a.dx_row_stride = -8; },
       "dx row stride -8 is smaller"},
      {"RMSNorm with a saved mean",
       [](BackwardArgs& a) {
         a.op = NormOp::kRmsNorm;
         a.dbeta = nullptr;
       },
       "RMSNorm takes no saved mean"},
      {"RMSNorm with dbeta",
       [](BackwardArgs& a) {
         a.op = NormOp::kRmsNorm;
         a.mean = nullptr;
       },
       "RMSNorm has no dbeta"},
      {"LayerNorm mean without rstd", [](BackwardArgs& a) { a.rstd = nullptr; },
       "both saved mean and rstd, or neither"},
      {"LayerNorm rstd without mean", [](BackwardArgs& a) { a.mean = nullptr; },
       "both saved mean and rstd, or neither"},
      {"parameters of a third dtype",
       [](BackwardArgs& a) {
         a.x_dtype = DType::kF16;
         a.param_dtype = DType::kBF16;
       },
       "gamma/beta dtype must be fp32 or the activation dtype"},
      {"epsilon negative", [](BackwardArgs& a) { a.epsilon = -1.0f; }, "epsilon must be finite"},
      {"dx stride past the extent bound",
       [](BackwardArgs& a) { a.dx_row_stride = std::numeric_limits<int64_t>::max(); },
       "dx: 3 rows of stride 9223372036854775807 span more than"},
  };
  uint32_t seed = 7;
  for (const BackwardCase& c : cases) {
    SCOPED_TRACE(c.name);
    BackwardBuffers buffers(seed++);
    BackwardArgs a = buffers.Args();
    ASSERT_TRUE(ValidateBackwardArgs(a).ok());
    c.spoil(a);
    const Status validated = ValidateBackwardArgs(a);
    EXPECT_EQ(validated.code(), Code::kInvalidArgument);
    EXPECT_NE(validated.message().find(c.message), std::string::npos) << validated.message();
    const Status computed = ReferenceBackward(a);
    EXPECT_EQ(computed.code(), Code::kInvalidArgument);
    EXPECT_EQ(computed.message(), validated.message());
    EXPECT_TRUE(buffers.OutputsUntouched());
  }
}

// Zero rows: the forward writes nothing; the backward's dgamma and dbeta are
// sums over no rows, zeros, and dx is not touched.
TEST(ArgumentValidation, ZeroRowsWriteNothingButTheEmptySums) {
  ForwardBuffers forward(11);
  ForwardSegment s = forward.Segment();
  s.rows = 0;
  s.x = s.out = nullptr;  // no rows: no tensor needed
  ASSERT_TRUE(ReferenceForward(&s, 1).ok());
  EXPECT_TRUE(forward.OutputsUntouched());

  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    SCOPED_TRACE(NormOpName(op));
    BackwardBuffers backward(12);
    BackwardArgs a = backward.Args();
    a.op = op;
    a.rows = 0;
    a.mean = op == NormOp::kLayerNorm ? a.mean : nullptr;
    if (op == NormOp::kRmsNorm) a.dbeta = nullptr;
    ASSERT_TRUE(ReferenceBackward(a).ok());
    for (float e : backward.dgamma) EXPECT_EQ(e, 0.0f);
    for (float e : backward.dbeta) EXPECT_EQ(e, op == NormOp::kLayerNorm ? 0.0f : kPoison);
    for (float e : backward.dx) EXPECT_EQ(e, kPoison);
  }
}

}  // namespace
}  // namespace normsvc::kernels
