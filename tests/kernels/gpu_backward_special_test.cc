// Backward on special rows of x: zero variance, near-constant, a large mean
// with a small spread, tiny values, a NaN, a +Inf; LayerNorm and RMSNorm, saved and recomputed
// statistics, every dtype and the backward kernels' paths (the case and its metric, non-finite
// results included: gpu_backward_case.h).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_backward_case.h"
#include "gpu_test_support.h"

namespace normsvc::kernels::testing {
namespace {

enum class RowKind { kRandom, kZeroVariance, kNearConstant, kLargeMean, kTiny, kNaN, kInf };

// Rewrites row r of x. Random rows keep the case's N(0.3, 1.7) values.
void WriteRow(HostTensor& x, int64_t r, RowKind kind, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  // Near-constant: 0.75 + 1e-6 N(0,1) in fp32; fp16 and bf16 round that to
  // 0.75, so there the spread is their spacing at 0.75 (2^-11, 2^-8).
  const double spread = x.dtype == DType::kF32 ? 1e-6 : OutputUlp(x.dtype, 0.75);
  // Large mean, small spread (catastrophic cancellation in the centring): 1e4
  // +- 1e-2 in fp32; 64 +- 0.5 in fp16 and bf16, which round 1e4 + 1e-2 to a
  // constant (as the forward special rows).
  const bool wide = x.dtype == DType::kF32;
  const double large_mean = wide ? 1e4 : 64.0;
  const double small_spread = wide ? 1e-2 : 0.5;
  for (int64_t c = 0; c < x.cols; ++c) {
    switch (kind) {
      case RowKind::kRandom:
        return;
      case RowKind::kZeroVariance:
        x.Set(r, c, 0.7);
        break;
      case RowKind::kNearConstant:
        x.Set(r, c, 0.75 + spread * normal(rng));
        break;
      case RowKind::kLargeMean:
        x.Set(r, c, large_mean + small_spread * normal(rng));
        break;
      case RowKind::kTiny:
        // Tiny values: in fp16 many are subnormal and their squares
        // underflow in any 16-bit arithmetic.
        x.Set(r, c, 1e-4 * normal(rng));
        break;
      case RowKind::kNaN:
        if (c == x.cols / 2) x.Set(r, c, NAN);
        break;
      case RowKind::kInf:
        if (c == x.cols / 3) x.Set(r, c, INFINITY);
        break;
    }
  }
}

// Three tensors a configuration, each of random rows with two zero-variance
// rows, two near-constant rows, a large-mean row and a tiny row among them:
// as they are (dx, dgamma and dbeta all within the metric), then with one
// more row holding a NaN, or a +Inf, in the middle. For that row the double
// reference (saved statistics: the reference's, rounded to fp32; both
// modes: NaN for LayerNorm and for a NaN row, rstd 0 for RMSNorm's +Inf row)
// gives a dx that is NaN throughout, as PyTorch does, so every dx element of
// that row must be non-finite while the other rows keep their values; dgamma
// must be non-finite exactly in the columns where the reference is (every
// column, but only the +Inf column for RMSNorm's +Inf row, whose other
// elements add dy * x * 0 = 0); dbeta (the sum of dy) stays finite and
// correct. The checks read a run whose outputs were poisoned with a finite
// pattern, so an unwritten element of the NaN row fails; RunAndCheck also
// runs each case twice for bitwise repetition.
TEST(BackwardSpecialRows, ConstantNearConstantLargeMeanTinyNaNAndInfRows) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward special rows");
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      for (bool given_stats : {true, false}) {
        // Staged rows within a block (64, 768, 4096) and across a cluster
        // (16384), BackwardRealignKernel (2049), the streamed kernel
        // (262144); recomputed statistics on rows 3 elements apart (off the
        // vector width: the element-wise paths).
        for (int64_t hidden : {64, 768, 2049, 4096, 16384, 262144}) {
          for (RowKind extra : {RowKind::kRandom, RowKind::kNaN, RowKind::kInf}) {
            const std::vector<RowKind> kinds = {RowKind::kRandom,       RowKind::kZeroVariance,
                                                RowKind::kNearConstant, extra,
                                                RowKind::kNearConstant, RowKind::kLargeMean,
                                                RowKind::kTiny,         RowKind::kRandom,
                                                RowKind::kZeroVariance};
            BackwardSpec s;
            s.op = op;
            s.dtype = s.param_dtype = dtype;
            s.rows = static_cast<int64_t>(kinds.size());
            s.hidden = hidden;
            s.given_stats = given_stats;
            s.pad = given_stats ? 0 : 3;
            s.label = extra == RowKind::kNaN   ? "constant, near-constant, large-mean, tiny, NaN"
                      : extra == RowKind::kInf ? "constant, near-constant, large-mean, tiny, +Inf"
                                               : "constant, near-constant, large-mean, tiny";
            s.rewrite_x = [kinds](HostTensor& x, std::mt19937_64& row_rng) {
              for (int64_t r = 0; r < x.rows; ++r) WriteRow(x, r, kinds[r], row_rng);
            };
            RunAndCheck(s, rng);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
