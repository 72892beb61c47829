// The forward kernel that stages gamma/beta in shared memory
// (ForwardLeanKernel's kStageParams; ParamStaging, kernels/src/param_staging.h),
// which one-segment launches of one wave, and longer ones as
// StagesMultiWaveLaunch says, take by default: against the double
// reference and, bit for bit, against the same rows as one-row segments of
// one multi-segment launch (which reads the parameters from global memory),
// with and without gamma, beta, residual and saved statistics; launches of
// many waves under each policy, bit for bit against the unstaged launch; and
// the launches it must not take (parameters in another dtype, more than one
// wave where the policy says so).
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "launch_common.h"
#include "normsvc/kernels/gpu.h"
#include "param_staging.h"

namespace normsvc::kernels::testing {
namespace {

// Restores the process's staging policy when a test ends, pass or fail.
class ParamStagingScope {
 public:
  ParamStagingScope() : saved_(detail::GetParamStaging()) {}
  ~ParamStagingScope() { detail::SetParamStaging(saved_); }

 private:
  detail::ParamStaging saved_;
};

// Runs `c` as one segment; returns whether the staging kernel took it.
bool RunOneSegment(ForwardCase& c) {
  c.PoisonOutputs();
  const int64_t before = detail::ParamStagedForwardLaunches();
  const Status status = LaunchForwardSegment(c.Segment(), nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return detail::ParamStagedForwardLaunches() == before + 1;
}

// A case of `rows` x `hidden` with gamma, beta, a residual and saved
// statistics present or not as `variant` cycles through their combinations.
ForwardSpec VariantSpec(DType dtype, NormOp op, int64_t rows, int64_t hidden, int variant) {
  ForwardSpec spec;
  spec.op = op;
  spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
  spec.rows = rows;
  spec.hidden = hidden;
  spec.gamma = variant % 4 != 3;
  spec.beta = variant % 5 != 4;
  spec.residual = spec.residual_out = variant % 3 == 1;
  spec.stats = variant % 2 == 0;
  return spec;
}

TEST(ForwardParamStaging, SmallLaunchesMatchReferenceAndOneRowSegmentsBitForBit) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("parameter staging");
  ParamStagingScope restore;
  detail::SetParamStaging(detail::ParamStaging::kOneWave);
  int variant = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      for (int64_t hidden : {8, 64, 768, 1024, 4096, 8192}) {
        // 200: more rows than the H200's 132 multiprocessors (the plan's own
        // blocks; WaveRowsPlan below that).
        for (int64_t rows : {1, 8, 64, 200}) {
          const ForwardSpec spec = VariantSpec(dtype, op, rows, hidden, ++variant);
          ForwardCase c(spec, rng);
          c.Upload();
          ASSERT_TRUE(RunOneSegment(c)) << "did not stage its parameters: " << Describe(spec);
          const std::vector<uint8_t> staged = c.OutputBytes();
          c.Check("parameters staged");

          std::vector<ForwardSegment> segments;
          const ForwardSegment base = c.Segment();
          for (int64_t r = 0; r < rows; ++r) {
            ForwardSegment s = base;
            s.rows = 1;
            const std::size_t x_bytes = DTypeSize(dtype) * static_cast<std::size_t>(r);
            s.x = static_cast<const char*>(base.x) + x_bytes * base.x_row_stride;
            s.out = static_cast<char*>(base.out) + x_bytes * base.out_row_stride;
            if (base.residual != nullptr) {
              s.residual =
                  static_cast<const char*>(base.residual) + x_bytes * base.residual_row_stride;
            }
            if (base.residual_out != nullptr) {
              s.residual_out =
                  static_cast<char*>(base.residual_out) + x_bytes * base.residual_out_row_stride;
            }
            if (base.mean != nullptr) s.mean = base.mean + r;
            if (base.rstd != nullptr) s.rstd = base.rstd + r;
            segments.push_back(s);
          }
          c.PoisonOutputs();
          DeviceBuffer workspace(ForwardWorkspaceBytes(static_cast<int>(segments.size())));
          const Status table = LaunchForward(segments.data(), static_cast<int>(segments.size()),
                                             workspace.get(), workspace.bytes(), nullptr, nullptr);
          ASSERT_TRUE(table.ok()) << table.message();
          CUDA_ASSERT_OK(cudaDeviceSynchronize());
          EXPECT_EQ(c.OutputBytes(), staged) << "one-row segments differ: " << Describe(spec);
        }
      }
    }
  }
}

TEST(ForwardParamStaging, NotForLargeLaunchesOtherParameterDtypesOrWhenOff) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("parameter staging policy");
  ParamStagingScope restore;
  detail::SetParamStaging(detail::ParamStaging::kOneWave);
  ForwardSpec spec;
  spec.x_dtype = spec.out_dtype = spec.param_dtype = DType::kBF16;
  spec.hidden = 4096;
  spec.rows = 64;
  {
    ForwardCase c(spec, rng);
    c.Upload();
    EXPECT_TRUE(RunOneSegment(c)) << "64 rows of 4096 are one wave";
    detail::SetParamStaging(detail::ParamStaging::kOff);
    EXPECT_FALSE(RunOneSegment(c)) << "policy off";
    c.Check("policy off");
    detail::SetParamStaging(detail::ParamStaging::kOneWave);
  }
  {
    ForwardSpec large = spec;
    large.rows = 8192;  // 4,096 row groups: more than fit on an H200 at once
    ForwardCase c(large, rng);
    c.Upload();
    EXPECT_FALSE(RunOneSegment(c)) << "more than one wave under one-wave";
    c.Check("more than one wave");
    detail::SetParamStaging(detail::ParamStaging::kMultiWarpRows);
    EXPECT_TRUE(RunOneSegment(c)) << "rows of four warps, 32 KB a block: staged";
    c.Check("more than one wave, staged");
  }
  {
    ForwardSpec short_rows = spec;
    short_rows.hidden = 1024;  // a warp a row
    short_rows.rows = 32768;
    ForwardCase c(short_rows, rng);
    c.Upload();
    EXPECT_FALSE(RunOneSegment(c)) << "rows of one warp, more than one wave";
    c.Check("rows of one warp");
    detail::SetParamStaging(detail::ParamStaging::kOneWave);
  }
  {
    ForwardSpec fp32_params = spec;
    fp32_params.param_dtype = DType::kF32;
    ForwardCase c(fp32_params, rng);
    c.Upload();
    EXPECT_FALSE(RunOneSegment(c)) << "fp32 parameters for bf16 rows";
    c.Check("fp32 parameters");
  }
}

TEST(ForwardParamStaging, LaunchesOfManyWavesGiveTheUnstagedBits) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("multi-wave parameter staging");
  ParamStagingScope restore;
  int variant = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      for (int64_t hidden : {768, 4096, 8192, 16384}) {
        // fp32 rows of 16,384 span a cluster: never staged.
        if (dtype == DType::kF32 && hidden == 16384) continue;
        // 2^23 elements: several times the row groups that fit at once.
        const int64_t rows = (int64_t{1} << 23) / hidden;
        const ForwardSpec spec = VariantSpec(dtype, op, rows, hidden, ++variant);
        const detail::KernelPlan plan = detail::PlanForward(hidden, dtype);
        const int64_t resident = detail::ResidentBlocks(
            reinterpret_cast<const void*>(detail::FindParamStagedForwardKernel(dtype, plan)),
            plan.block_threads, detail::ParamStagingBytes(plan));
        ASSERT_GT((rows + plan.groups - 1) / plan.groups, resident)
            << "one wave, not a long launch: " << Describe(spec);
        ForwardCase c(spec, rng);
        c.Upload();
        detail::SetParamStaging(detail::ParamStaging::kOff);
        ASSERT_FALSE(RunOneSegment(c)) << "staged with the policy off: " << Describe(spec);
        const std::vector<uint8_t> unstaged = c.OutputBytes();
        c.Check("unstaged");
        detail::SetParamStaging(detail::ParamStaging::kEveryLaunch);
        ASSERT_TRUE(RunOneSegment(c)) << "every-launch did not stage: " << Describe(spec);
        EXPECT_EQ(c.OutputBytes(), unstaged) << "every-launch differs: " << Describe(spec);
        detail::SetParamStaging(detail::ParamStaging::kMultiWarpRows);
        const bool staged = RunOneSegment(c);
        EXPECT_EQ(staged,
                  detail::StagesMultiWaveLaunch(plan, op, detail::ParamStaging::kMultiWarpRows))
            << Describe(spec);
        EXPECT_EQ(c.OutputBytes(), unstaged) << "the default differs: " << Describe(spec);
      }
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
