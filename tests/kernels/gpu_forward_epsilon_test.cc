// Forward epsilon: every segment of a multi-segment launch normalized with
// its own epsilon, and special rows (near-constant, tiny fp16 values, zero
// variance) under an epsilon of 1e-12, far below their variance, so that the
// variance and not epsilon decides rstd. Metric: gpu_test_support.h; the
// saved mean and rstd as ForwardCase::Check states them (rstd within 1e-5
// relative of the double reference computed with the segment's epsilon).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "normsvc/kernels/gpu.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::kernels::testing {
namespace {

// rstd of row r of `c` by the double reference with `epsilon`.
double ReferenceRstd(ForwardCase& c, int64_t r, double epsilon) {
  const std::vector<double> row = c.x().Row(r);
  return ReferenceForwardRow(c.spec().op, row.data(), nullptr, nullptr, nullptr, c.spec().hidden,
                             epsilon)
      .rstd;
}

// Segments of one launch with epsilons 1e-5, 1e-12 and 0.25, in this order,
// of the same H, dtype and op (the same plan, hence the same kernel launch
// and segment table group) for every H, dtype and op; rows of standard
// deviation 1e-3 (variance 1e-6, between those epsilons), so that each
// epsilon moves rstd by far more than its tolerance. Each segment must match
// the reference taken with its own epsilon (out and the saved rstd and mean)
// and give the bits it gives alone. A kernel that took the epsilon of the
// group's or the launch's first (or last) segment for every row fails the
// rstd and out checks of the other two.
TEST(ForwardEpsilon, EachSegmentOfAMixedLaunchUsesItsOwnEpsilon) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("per-segment epsilon");
  constexpr float kEpsilons[] = {1e-5f, 1e-12f, 0.25f};
  std::vector<std::unique_ptr<ForwardCase>> cases;
  for (int64_t hidden : {64, 768, 2049, 4096, 12289, 65536}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        for (float epsilon : kEpsilons) {
          ForwardSpec spec;
          spec.op = op;
          spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
          spec.rows = hidden >= 65536 ? 2 : 5;
          spec.hidden = hidden;
          spec.stats = true;
          spec.epsilon = epsilon;
          // RMSNorm's mean(v^2) is the variance only about 0.
          spec.x_mean = op == NormOp::kLayerNorm ? 0.05 : 0.0;
          spec.x_stddev = 1e-3;
          cases.push_back(std::make_unique<ForwardCase>(spec, rng));
          ForwardCase& c = *cases.back();
          // The data make every epsilon visible: the rstd of each row under
          // the other epsilons is off by far more than the 1e-5 tolerance.
          for (int64_t r = 0; r < spec.rows; ++r) {
            const double own = ReferenceRstd(c, r, epsilon);
            for (float other : kEpsilons) {
              if (other == epsilon) continue;
              ASSERT_GT(std::fabs(ReferenceRstd(c, r, other) / own - 1.0), 1e-2)
                  << "epsilon " << other << " would pass for " << epsilon << ": " << Describe(spec);
            }
          }
          c.Upload();
        }
      }
    }
  }
  std::vector<std::vector<uint8_t>> alone;
  for (auto& c : cases) {
    alone.push_back(RunAlone(*c));
    c->Check("alone");
  }

  std::vector<ForwardSegment> segments;
  for (auto& c : cases) segments.push_back(c->Segment());
  CheckMixedLaunchBothWays(segments, cases, alone, "epsilon");
}

// Rows written over the random rows of a case.
enum class RowKind {
  kNearConstant,          // 0.75 + 1e-6 N(0,1): constant once rounded to fp16/bf16
  kNearConstantResolved,  // 0.75 + s N(0,1), s the dtype's spacing at 0.75 (fp32: 1e-6)
  kTiny,                  // 1e-4 N(0,1): subnormal in fp16, squares below fp16's range
  kZeroVariance,          // 0.7
  kRandom
};

const char* RowName(RowKind kind) {
  switch (kind) {
    case RowKind::kNearConstant:
      return "near-constant";
    case RowKind::kNearConstantResolved:
      return "near-constant (dtype resolution)";
    case RowKind::kTiny:
      return "tiny";
    case RowKind::kZeroVariance:
      return "zero variance";
    case RowKind::kRandom:
      return "random";
  }
  return "?";
}

void WriteRow(HostTensor& t, int64_t r, RowKind kind, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  // The spacing of the dtype at 0.75: 2^-24 (fp32; the row keeps 1e-6), 2^-11
  // (fp16), 2^-8 (bf16).
  const double resolved = t.dtype == DType::kF32 ? 1e-6 : OutputUlp(t.dtype, 0.75);
  for (int64_t c = 0; c < t.cols; ++c) {
    double value = 0.3 + 1.7 * normal(rng);
    switch (kind) {
      case RowKind::kNearConstant:
        value = 0.75 + 1e-6 * normal(rng);
        break;
      case RowKind::kNearConstantResolved:
        value = 0.75 + resolved * normal(rng);
        break;
      case RowKind::kTiny:
        value = 1e-4 * normal(rng);
        break;
      case RowKind::kZeroVariance:
        value = 0.7;
        break;
      case RowKind::kRandom:
        break;
    }
    t.Set(r, c, value);
  }
}

// Under epsilon 1e-5 the near-constant row's variance (1e-12) and the tiny
// row's (1e-8) hardly move rstd, so a variance that underflowed to 0 (fp16
// squares of 1e-4 values) or was lost to cancellation (E[v^2] - E[v]^2 in
// fp32 on values near 0.75 leaves a multiple of 2^-25..2^-24, or 0, for a
// variance of 1e-12) would pass. Under 1e-12 the variance decides rstd: a
// zero variance gives 1/sqrt(1e-12) = 1e6 where the near-constant fp32 row
// needs about 7.1e5 and the tiny row about 1e4. Every row is checked against
// the reference taken with epsilon 1e-12: out, mean and rstd.
TEST(ForwardSpecialRows, TinyEpsilonLetsTheVarianceDecide) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("special rows, epsilon 1e-12");
  const RowKind kinds[] = {RowKind::kNearConstant, RowKind::kNearConstantResolved, RowKind::kTiny,
                           RowKind::kZeroVariance, RowKind::kRandom};
  constexpr float kEpsilon = 1e-12f;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      // As in ForwardSpecialRows.MatchReferenceIncludingNaNAndInf: every
      // kernel (warp rows, register rows, the realigning and strided paths,
      // rows across a cluster, the largest rows).
      for (int64_t hidden : {64, 768, 2049, 4096, 8191, 12289, 65536, 262144}) {
        ForwardSpec spec;
        spec.op = op;
        spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
        spec.rows = std::size(kinds);
        spec.hidden = hidden;
        spec.stats = true;
        spec.epsilon = kEpsilon;
        ForwardCase c(spec, rng);
        for (int64_t r = 0; r < spec.rows; ++r) WriteRow(c.x(), r, kinds[r], rng);
        // The rows meant to have a variance have one that decides rstd: a
        // variance of 0 would be off by more than 10%. (RMSNorm's mean(v^2)
        // of the rows near 0.75 is 0.56: only its tiny row qualifies.)
        for (int64_t r = 0; r < spec.rows; ++r) {
          const bool near_constant_kept =
              kinds[r] == RowKind::kNearConstantResolved ||
              (kinds[r] == RowKind::kNearConstant && dtype == DType::kF32);
          const bool decides =
              kinds[r] == RowKind::kTiny || (op == NormOp::kLayerNorm && near_constant_kept);
          if (!decides) continue;
          const double rstd = ReferenceRstd(c, r, kEpsilon);
          EXPECT_GT(1.0 / std::sqrt(static_cast<double>(kEpsilon)) / rstd, 1.1)
              << RowName(kinds[r]) << " row: epsilon decides its rstd, " << Describe(spec);
        }
        c.Upload();
        const Status st = LaunchForwardSegment(c.Segment(), nullptr);
        ASSERT_TRUE(st.ok()) << st.message();
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        const double ratio = c.Check("special rows, epsilon 1e-12");
        std::printf("[ eps 1e-12] %-60s max err/tol %.3f\n", Describe(spec).c_str(), ratio);
      }
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
