// The forward test matrix on the GPU against the double reference:
// op x dtype x H in {1, 5, 64, 128, 512, 768, 1024, 2049, 4096, 8191, 65536,
// 262144} x rows in {1, 3, 1000}, in two variants each (see RunVariants).
// Rows are capped so that rows x H <= 2^24 elements (MaxCaseElements; H = 65536: 256 rows,
// H = 262144: 64 rows) to keep the double reference fast.
#include <algorithm>
#include <cstdio>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

constexpr int64_t kHiddenSizes[] = {1, 5, 64, 128, 512, 768, 1024, 2049, 4096, 8191, 65536, 262144};
constexpr int64_t kRowCounts[] = {1, 3, 1000};

DType OtherDType(DType d) { return d == DType::kF32 ? DType::kBF16 : DType::kF32; }

// Variant "full": gamma and beta in the activation dtype, fused residual with
// residual_out, mean/rstd saved, contiguous rows, through LaunchForward's
// segment path. Variant "plain": fp32 gamma only, no residual, output in
// another dtype, row strides that are not multiples of the vector width
// (misaligned rows), rstd only, through LaunchForwardSegment.
std::vector<ForwardSpec> Variants(NormOp op, DType dtype, int64_t rows, int64_t hidden) {
  ForwardSpec full;
  full.op = op;
  full.x_dtype = full.out_dtype = full.param_dtype = dtype;
  full.rows = rows;
  full.hidden = hidden;
  full.gamma = full.beta = true;
  full.residual = full.residual_out = true;
  full.stats = true;

  ForwardSpec plain = full;
  plain.out_dtype = OtherDType(dtype);
  plain.param_dtype = DType::kF32;
  plain.beta = false;
  plain.residual = plain.residual_out = false;
  plain.x_pad = 3;
  plain.out_pad = 1;
  plain.stats = true;
  return {full, plain};
}

class ForwardMatrix : public ::testing::TestWithParam<std::tuple<NormOp, DType>> {};

TEST_P(ForwardMatrix, MatchesDoubleReference) {
  NORMSVC_REQUIRE_GPU();
  const auto [op, dtype] = GetParam();
  std::mt19937_64 rng = SeededRng(std::string(NormOpName(op)) + " " + DTypeName(dtype));
  DeviceBuffer workspace(ForwardWorkspaceBytes(1));
  for (int64_t hidden : kHiddenSizes) {
    for (int64_t rows : kRowCounts) {
      rows = std::min(rows, std::max<int64_t>(1, MaxCaseElements() / hidden));
      int variant = 0;
      for (const ForwardSpec& spec : Variants(op, dtype, rows, hidden)) {
        ForwardCase c(spec, rng);
        c.Upload();
        const ForwardSegment segment = c.Segment();
        const Status st = variant == 0 ? LaunchForward(&segment, 1, workspace.get(),
                                                       workspace.bytes(), nullptr, nullptr)
                                       : LaunchForwardSegment(segment, nullptr);
        ASSERT_TRUE(st.ok()) << st.message() << " [" << Describe(spec) << "]";
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        const double ratio = c.Check(variant == 0 ? "full" : "plain");
        std::printf("[ forward  ] %-80s max err/tol %.3f\n", Describe(spec).c_str(), ratio);
        ++variant;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ForwardMatrix,
                         ::testing::Combine(::testing::Values(NormOp::kLayerNorm, NormOp::kRmsNorm),
                                            ::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16)),
                         [](const ::testing::TestParamInfo<ForwardMatrix::ParamType>& param) {
                           return std::string(NormOpName(std::get<0>(param.param))) + "_" +
                                  DTypeName(std::get<1>(param.param));
                         });

// The largest hidden size the API allows, on every path (streamed for all dtypes).
TEST(ForwardLimits, LargestHiddenSize) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("largest hidden");
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      ForwardSpec spec = Variants(op, dtype, 2, kMaxHidden)[0];
      ForwardCase c(spec, rng);
      c.Upload();
      ASSERT_TRUE(LaunchForwardSegment(c.Segment(), nullptr).ok());
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
      c.Check("largest hidden");
    }
  }
}

// Every aligned/misaligned and residual/affine combination at one size per path.
TEST(ForwardOptions, EveryOptionCombination) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("options");
  for (int64_t hidden : {24, 768, 2048, 3000, 32768}) {
    for (int mask = 0; mask < 32; ++mask) {
      ForwardSpec spec;
      spec.op = (mask & 1) ? NormOp::kRmsNorm : NormOp::kLayerNorm;
      spec.x_dtype = spec.out_dtype = DType::kBF16;
      spec.param_dtype = (mask & 2) ? DType::kF32 : DType::kBF16;
      spec.gamma = (mask & 4) != 0;
      spec.beta = (mask & 8) != 0;
      spec.residual = spec.residual_out = (mask & 16) != 0;
      spec.stats = (mask & 4) != 0;
      spec.offset = (mask & 2) ? 1 : 0;  // whole tensor off 16-byte alignment
      spec.rows = 5;
      spec.hidden = hidden;
      ForwardCase c(spec, rng);
      c.Upload();
      ASSERT_TRUE(LaunchForwardSegment(c.Segment(), nullptr).ok());
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
      c.Check("options");
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
