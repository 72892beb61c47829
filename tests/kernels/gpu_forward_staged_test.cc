// The staged forward kernel (rows too long for registers, and rows of more
// than two register blocks, held in the shared memory of a cluster:
// Layout::kStaged in kernels/src/launch_plan.h)
// against the double reference on every dtype, op and affine combination,
// aligned and misaligned rows, H not a multiple of the vector width, the
// fused residual, fp32 parameters and another output dtype, rows with a
// large mean; the lean staged kernel (aligned rows without a residual,
// output and parameters in the x dtype) on every dtype, op and affine;
// more rows than the device holds clusters at once (the
// persistent loop); the launch counter says the staged kernel served each;
// and the same rows bit for bit inside a multi-segment launch beside rows of
// other hidden sizes.
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "forward_segments.h"
#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "launch_common.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

// Runs the case alone and asserts that the staged kernel served it.
std::vector<uint8_t> RunStaged(ForwardCase& c) {
  c.PoisonOutputs();
  const int64_t before = detail::StagedForwardLaunches();
  const Status st = LaunchForwardSegment(c.Segment(), nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(detail::StagedForwardLaunches(), before + 1)
      << "not served by the staged kernel: " << Describe(c.spec());
  return c.OutputBytes();
}

TEST(ForwardStaged, PlansOfLongRows) {
  // Host-side facts the GPU cases below rely on.
  EXPECT_EQ(detail::PlanForward(262144, DType::kF32).layout, detail::Layout::kStaged);
  EXPECT_EQ(detail::PlanForward(393216, DType::kF32).slots, 12);  // 192 KiB a block of 1024
  EXPECT_EQ(detail::PlanForward(131073, DType::kBF16).layout, detail::Layout::kStaged);
}

TEST(ForwardStaged, MatchesReferenceOnEveryVariant) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged forward");
  int variant = 0;
  // Rows the register layouts hold that are staged, 8 chunks a thread or
  // fewer: in clusters of 2 blocks of 512 up to 8,192 chunks (fp32 16388
  // and 32768, 16-bit 65536), past that of 5 to 8 blocks of 256 (fp32
  // 49152: 6, 65536: 8; 16-bit 98304: 6, 131072: 8). fp32 65537 and
  // 16-bit 131073: just past the register layouts; 262143: a partial last
  // chunk; 393216 (fp32): the most a cluster holds. Blocks of 512 (fp32
  // 65537, bf16 262144) and of 1024 (fp32 262144).
  for (int64_t hidden :
       {16388, 32768, 49152, 65536, 98304, 131072, 65537, 131073, 262143, 262144, 393216}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      if (detail::PlanForward(hidden, dtype).layout != detail::Layout::kStaged) continue;
      for (int repeat = 0; repeat < 2; ++repeat) {
        ++variant;
        ForwardSpec spec;
        spec.op = variant % 2 ? NormOp::kLayerNorm : NormOp::kRmsNorm;
        spec.x_dtype = dtype;
        spec.out_dtype = variant % 5 == 3 ? DType::kF32 : dtype;
        spec.param_dtype = dtype != DType::kF32 && variant % 3 == 0 ? DType::kF32 : dtype;
        spec.rows = repeat == 0 ? 3 : 1;
        spec.hidden = hidden;
        spec.offset = variant % 3 == 2 ? 1 : 0;  // 1: element-wise accesses
        spec.x_pad = variant % 4 == 1 ? 3 : 0;
        spec.gamma = variant % 4 != 3;
        spec.beta = variant % 5 != 4;
        spec.residual = variant % 3 == 1;
        spec.residual_out = spec.residual && variant % 2 == 0;
        spec.stats = true;
        if (variant % 7 == 5) {
          spec.x_mean = 1e4;  // catastrophic cancellation for a one-pass variance
          spec.x_stddev = 1e-2;
        }
        ForwardCase c(spec, rng);
        c.Upload();
        RunStaged(c);
        c.Check("staged");
      }
    }
  }
  EXPECT_GT(variant, 20);
}

// Aligned rows without a residual, their output and gamma/beta in the x
// dtype, take the lean staged kernel (ForwardStagedKernel<T, true>): every
// dtype, both ops and every affine (large means where both parameters
// are given) against the double reference, with the path that serves them.
TEST(ForwardStaged, LeanKernelOnEveryDtypeOpAndAffine) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged forward, lean kernel");
  int cases = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int64_t hidden = dtype == DType::kF32 ? 32768 : 65536;
    const detail::KernelPlan plan = detail::PlanForward(hidden, dtype);
    ASSERT_EQ(plan.layout, detail::Layout::kStaged);
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      for (const auto& [gamma, beta] : {std::pair{false, false}, std::pair{true, false},
                                        std::pair{false, true}, std::pair{true, true}}) {
        if (op == NormOp::kRmsNorm && beta) continue;
        ForwardSpec spec;
        spec.op = op;
        spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
        spec.rows = 3;
        spec.hidden = hidden;
        spec.gamma = gamma;
        spec.beta = beta;
        spec.stats = true;
        if (gamma && beta) {
          spec.x_mean = 1e4;
          spec.x_stddev = 1e-2;
        }
        ForwardCase c(spec, rng);
        c.Upload();
        ASSERT_EQ(detail::SegmentPath(c.Segment(), plan), detail::ForwardPath::kLean)
            << Describe(spec);
        RunStaged(c);
        c.Check("staged, lean");
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 18);
}

// More rows than clusters fit at once, so each cluster loops over rows and
// alternates its reduction slots: fp32 262144 (one 128 KiB block of 1024
// threads a multiprocessor: 15 clusters on an H200) and bf16 262144 (two
// blocks of 512 a multiprocessor), the latter misaligned with a residual
// (the register path into the stage), and fp32 65536 (clusters of 8). The
// launch takes as many clusters as the runtime says fit (ResidentClusters),
// fewer than blocks / cluster.
TEST(ForwardStaged, PersistentClustersLoopOverManyRows) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged forward, many rows");
  int variant = 0;
  struct Shape {
    DType dtype;
    int64_t hidden;
    int64_t rows;
  };
  // fp32 65536: clusters of 8 blocks of 256, about 60 at once.
  for (const Shape& shape : {Shape{DType::kF32, 262144, 67}, Shape{DType::kBF16, 262144, 67},
                             Shape{DType::kF32, 65536, 150}}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      ++variant;
      const DType dtype = shape.dtype;
      ForwardSpec spec;
      spec.op = op;
      spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
      spec.rows = shape.rows;
      spec.hidden = shape.hidden;
      spec.stats = true;
      spec.offset = dtype == DType::kBF16 ? 1 : 0;
      spec.residual = spec.residual_out = dtype == DType::kBF16 && variant % 2 == 1;
      const detail::KernelPlan plan = detail::PlanForward(spec.hidden, dtype);
      ForwardCase c(spec, rng);
      c.Upload();
      // The kernel that serves the case (the lean one for the aligned rows
      // without a residual).
      const void* kernel = reinterpret_cast<const void*>(detail::FindForwardKernel(
          dtype, plan, detail::SegmentPath(c.Segment(), plan), dtype, true));
      ASSERT_NE(kernel, nullptr);
      const std::size_t smem = detail::StagedForwardSmemBytes(plan);
      const int64_t clusters =
          detail::ResidentClusters(kernel, plan.block_threads, plan.cluster, smem);
      ASSERT_GT(clusters, 0);
      ASSERT_LT(clusters, spec.rows) << "the clusters would not loop";
      EXPECT_LE(clusters * plan.cluster, detail::ResidentBlocks(kernel, plan.block_threads, smem));
      RunStaged(c);
      c.Check("staged, many rows");
    }
  }
}

// Batch invariance: the staged rows give the same bits alone and in one
// launch beside rows of other sizes (a short row, a row staged in a cluster
// of two) and other staged sizes that share their plan (bf16 262144 and
// 262143: 8 chunks a thread), aligned and misaligned; the two aligned
// 262144 tensors share a launch of the lean staged kernel (a segment
// table), their misaligned copies one of the general kernel.
TEST(ForwardStaged, RowsGiveTheSameBitsInAMixedLaunch) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged forward, mixed launch");
  std::vector<std::unique_ptr<ForwardCase>> cases;
  int variant = 0;
  for (int64_t hidden : {262144, 262143, 4096, 65536, 262144}) {
    ++variant;
    ForwardSpec spec;
    // The staged sizes of 8 chunks a thread with one op: one plan.
    spec.op = hidden >= 262143 ? NormOp::kLayerNorm : NormOp::kRmsNorm;
    spec.x_dtype = spec.out_dtype = spec.param_dtype = DType::kBF16;
    spec.rows = variant == 5 ? 3 : hidden >= 262143 ? 5 : 7;
    spec.hidden = hidden;
    spec.stats = true;
    spec.residual = variant == 2;
    spec.residual_out = variant == 2;
    AddAlignedAndMisalignedPair(spec, rng, cases);
  }
  std::vector<std::vector<uint8_t>> alone;
  std::vector<ForwardSegment> segments;
  for (auto& c : cases) {
    alone.push_back(RunAlone(*c));
    segments.push_back(c->Segment());
  }
  // Aligned and misaligned copies of the same rows give the same bits: for
  // the staged sizes without a residual (262144, 65536), the lean staged
  // kernel against the general one.
  for (std::size_t i = 0; i + 1 < cases.size(); i += 2) {
    EXPECT_EQ(cases[i]->DenseOutputBytes(), cases[i + 1]->DenseOutputBytes())
        << "aligned and misaligned H " << cases[i]->spec().hidden;
  }
  CheckMixedLaunchBothWays(segments, cases, alone, "staged, mixed launch");
}

}  // namespace
}  // namespace normsvc::kernels::testing
