// One backward test case on the GPU: random x, dy and gamma in any dtype and
// layout, the launch run twice (outputs poisoned differently before each),
// and the checks: dx, dgamma and dbeta against the double reference (metric
// below), bit-for-bit repetition, and no dx byte written outside the rows.
//
// Rows of x may be rewritten (BackwardSpec::rewrite_x: NaN, Inf, constant
// rows): where the double reference of a dx element, dgamma or dbeta column
// is non-finite (a NaN or Inf in x, or in the statistics it gives), the
// result must be non-finite too, as PyTorch propagates them; everywhere else
// the metric below applies.
//
// Metric: with xhat, g = dy * gamma and the row means computed in double,
//   |dx - ref| <= 2e-5 * rstd * (|g| + mean|g| + |xhat| * (|mean(g xhat)| + mean|g xhat|))
//                 + ulp(ref) for fp16/bf16 dx
//   |dgamma - ref| <= 2e-5 * sum_rows |dy| (|xhat| + 1),   |dbeta - ref| <= 2e-5 * sum_rows |dy|
// (fp32 sums of many terms: the bound scales with the terms' magnitudes; the
// +1 covers xhat's absolute error from fp32 statistics when xhat is near 0).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::testing {

struct BackwardSpec {
  NormOp op = NormOp::kLayerNorm;
  DType dtype = DType::kF32;
  DType param_dtype = DType::kF32;
  int64_t rows = 1;
  int64_t hidden = 1;
  int64_t pad = 0;         // extra elements per row of x, dy and dx
  int64_t offset = 0;      // elements before row 0 of x, dy and dx in their buffers
  int64_t dx_offset = -1;  // elements before dx's row 0 when not `offset` (-1: the same)
  bool gamma = true;
  bool given_stats = true;
  bool dgamma = true;
  bool dbeta = true;  // LayerNorm only
  // Called after x and dy are filled at random, before the statistics are
  // taken: rewrites rows of x (columns below hidden only). Empty: none.
  std::function<void(HostTensor& x, std::mt19937_64& rng)> rewrite_x;
  std::string label;  // names the rewritten rows in Describe
};

std::string Describe(const BackwardSpec& s);

// Runs one backward case twice and checks the results (gtest failures);
// returns the largest error over its tolerance.
double RunAndCheck(const BackwardSpec& spec, std::mt19937_64& rng);

// Sets whether backward launches may take BackwardRealignKernel for the
// scope, and restores the setting after (process-wide).
class ScopedBackwardRealign {
 public:
  explicit ScopedBackwardRealign(bool enabled) : before_(detail::BackwardRealignEnabled()) {
    detail::SetBackwardRealignEnabled(enabled);
  }
  ~ScopedBackwardRealign() { detail::SetBackwardRealignEnabled(before_); }
  ScopedBackwardRealign(const ScopedBackwardRealign&) = delete;
  ScopedBackwardRealign& operator=(const ScopedBackwardRealign&) = delete;

 private:
  bool before_;
};

}  // namespace normsvc::kernels::testing
