// The long hidden sizes with the largest row count: 1,000 rows of
// H = 65,536 and 262,144, forward and backward, every dtype and op, against
// the double reference. The matrices (gpu_forward_test.cc,
// gpu_backward_test.cc) cap a case at MaxCaseElements() (2^24: 256 and 64
// rows at these H), which keeps them fast but leaves the kernels' loops over
// many waves of long rows (the staged and streamed kernels, the backward's
// units and their column reduction over 1,000 rows) to this test. With
// NORMSVC_TEST_MAX_ELEMENTS set (the sanitizer runs) the rows are capped as
// there.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "gpu_backward_case.h"
#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

constexpr int64_t kRows = 1000;
constexpr int64_t kLongHiddenSizes[] = {65536, 262144};

int64_t RowsAt(int64_t hidden) {
  if (MaxCaseElements() >= (int64_t{1} << 24)) return kRows;
  return std::max<int64_t>(3, MaxCaseElements() / hidden);
}

TEST(LongRows, ForwardThousandRowsMatchTheReference) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("forward long rows");
  for (int64_t hidden : kLongHiddenSizes) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        ForwardSpec spec;
        spec.op = op;
        spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
        spec.rows = RowsAt(hidden);
        spec.hidden = hidden;
        spec.beta = op == NormOp::kLayerNorm;
        spec.stats = true;
        ForwardCase c(spec, rng);
        c.Upload();
        const Status st = LaunchForwardSegment(c.Segment(), nullptr);
        ASSERT_TRUE(st.ok()) << st.message() << " [" << Describe(spec) << "]";
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        const double ratio = c.Check("long rows");
        std::printf("[ forward  ] %-80s max err/tol %.3f\n", Describe(spec).c_str(), ratio);
      }
    }
  }
}

// Saved statistics with gamma in the activation dtype, and recomputed ones
// with fp32 gamma; dgamma and dbeta reduced over all 1,000 rows, each case
// run twice for bitwise repetition (RunAndCheck).
TEST(LongRows, BackwardThousandRowsMatchTheReferenceAndRepeat) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward long rows");
  for (int64_t hidden : kLongHiddenSizes) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        BackwardSpec saved;
        saved.op = op;
        saved.dtype = saved.param_dtype = dtype;
        saved.rows = RowsAt(hidden);
        saved.hidden = hidden;
        saved.dbeta = op == NormOp::kLayerNorm;
        RunAndCheck(saved, rng);
        BackwardSpec recomputed = saved;
        recomputed.param_dtype = DType::kF32;
        recomputed.given_stats = false;
        RunAndCheck(recomputed, rng);
      }
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
