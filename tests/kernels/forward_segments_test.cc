// Which kernel family the forward launcher gives a segment
// (kernels/src/forward_segments.h), from its pointers' alignment, pitches,
// dtypes and plan. Host code only: the pointers are addresses, never
// dereferenced, so it runs without a GPU.
#include "forward_segments.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace normsvc::kernels::detail {
namespace {

// An address `offset` bytes past a 256-byte boundary (as cudaMalloc returns
// them), distinct for each buffer.
void* At(int buffer, int64_t offset) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(0x100000 * (buffer + 1) + offset));
}

// A contiguous tensor of `rows` x `hidden` in every activation buffer, row 0
// `offset` elements in; gamma and beta 16-byte aligned.
ForwardSegment Contiguous(DType dtype, int64_t rows, int64_t hidden, int64_t offset = 0) {
  const int64_t bytes = offset * static_cast<int64_t>(DTypeSize(dtype));
  ForwardSegment s;
  s.rows = rows;
  s.hidden = hidden;
  s.x_dtype = s.out_dtype = s.param_dtype = dtype;
  s.x = At(0, bytes);
  s.x_row_stride = hidden;
  s.out = At(1, bytes);
  s.out_row_stride = hidden;
  s.gamma = At(2, 0);
  s.beta = At(3, 0);
  return s;
}

ForwardPath PathFor(const ForwardSegment& s) {
  return SegmentPath(s, PlanForward(s.hidden, s.x_dtype));
}

TEST(ForwardSegments, AlignedRowsOfWholeChunksTakeTheSpecializedKernel) {
  EXPECT_EQ(PathFor(Contiguous(DType::kBF16, 4096, 4096)), ForwardPath::kLean);
  EXPECT_EQ(PathFor(Contiguous(DType::kF32, 16, 768)), ForwardPath::kLean);
  // One row: its pitch does not matter.
  ForwardSegment one = Contiguous(DType::kBF16, 1, 1024);
  one.x_row_stride = one.out_row_stride = 1027;
  EXPECT_EQ(PathFor(one), ForwardPath::kLean);
}

// Staged rows (Layout::kStaged) of whole aligned chunks take the lean staged
// kernel, which adds no residual and reads gamma/beta in the x dtype; every
// other staged row the general one (the same bits either way).
TEST(ForwardSegments, StagedRowsTakeTheLeanKernelOnlyWithoutResidualOrOtherParameterDtype) {
  const ForwardSegment aligned = Contiguous(DType::kBF16, 4, 65536);
  ASSERT_EQ(PlanForward(65536, DType::kBF16).layout, Layout::kStaged);
  EXPECT_EQ(PathFor(aligned), ForwardPath::kLean);
  EXPECT_EQ(PathFor(Contiguous(DType::kF32, 4, 65536)), ForwardPath::kLean);
  EXPECT_EQ(PathFor(Contiguous(DType::kF16, 4, 65536)), ForwardPath::kLean);
  EXPECT_EQ(PathFor(Contiguous(DType::kBF16, 4, 65536, 1)), ForwardPath::kGeneral);
  ASSERT_EQ(PlanForward(131073, DType::kBF16).layout, Layout::kStaged);
  EXPECT_EQ(PathFor(Contiguous(DType::kBF16, 4, 131073)), ForwardPath::kGeneral);  // partial chunk
  ForwardSegment residual = aligned;
  residual.residual = At(4, 0);
  residual.residual_row_stride = aligned.x_row_stride;
  EXPECT_EQ(PathFor(residual), ForwardPath::kGeneral);
  ForwardSegment fp32_params = aligned;
  fp32_params.param_dtype = DType::kF32;
  EXPECT_EQ(PathFor(fp32_params), ForwardPath::kGeneral);
  fp32_params.beta = nullptr;  // gamma alone in fp32
  EXPECT_EQ(PathFor(fp32_params), ForwardPath::kGeneral);
  fp32_params.gamma = nullptr;  // no parameters: their dtype does not matter
  EXPECT_EQ(PathFor(fp32_params), ForwardPath::kLean);
  ForwardSegment fp32_out = aligned;
  fp32_out.out_dtype = DType::kF32;
  EXPECT_EQ(PathFor(fp32_out), ForwardPath::kGeneral);
}

TEST(ForwardSegments, RowsOffTheirBoundaryAreRealigned) {
  // H not a multiple of the vector width: every row but some is misaligned.
  EXPECT_EQ(PathFor(Contiguous(DType::kBF16, 8189, 2049)), ForwardPath::kRealign);
  EXPECT_EQ(PathFor(Contiguous(DType::kF32, 8189, 2049)), ForwardPath::kRealign);
  EXPECT_EQ(PathFor(Contiguous(DType::kF16, 3, 5)), ForwardPath::kRealign);
  // Even one aligned row of such an H has a partial last chunk.
  EXPECT_EQ(PathFor(Contiguous(DType::kBF16, 1, 2049)), ForwardPath::kRealign);
  // Whole chunks on a misaligned base, or a misaligned pitch.
  EXPECT_EQ(PathFor(Contiguous(DType::kBF16, 64, 256, 3)), ForwardPath::kRealign);
  ForwardSegment pitched = Contiguous(DType::kF32, 64, 128);
  pitched.x_row_stride = pitched.out_row_stride = 130;
  EXPECT_EQ(PathFor(pitched), ForwardPath::kRealign);
  // With the residual and residual_out at the same offsets.
  ForwardSegment residual = Contiguous(DType::kBF16, 9, 2049, 5);
  residual.residual = At(4, 10);
  residual.residual_row_stride = 2049;
  residual.residual_out = At(5, 10);
  residual.residual_out_row_stride = 2049;
  EXPECT_EQ(PathFor(residual), ForwardPath::kRealign);
}

TEST(ForwardSegments, RowsThatDoNotShareTheirOffsetsTakeTheGeneralKernel) {
  // out one element further along than x.
  ForwardSegment shifted = Contiguous(DType::kBF16, 9, 2049);
  shifted.out = At(1, 2);
  EXPECT_EQ(PathFor(shifted), ForwardPath::kGeneral);
  // out rows one element further apart than x rows.
  ForwardSegment pitched = Contiguous(DType::kBF16, 9, 2049);
  pitched.out_row_stride = 2050;
  EXPECT_EQ(PathFor(pitched), ForwardPath::kGeneral);
  // The residual elsewhere.
  ForwardSegment residual = Contiguous(DType::kBF16, 9, 2049);
  residual.residual = At(4, 6);
  residual.residual_row_stride = 2049;
  EXPECT_EQ(PathFor(residual), ForwardPath::kGeneral);
  // gamma not 16-byte aligned.
  ForwardSegment gamma = Contiguous(DType::kBF16, 9, 2049);
  gamma.gamma = At(2, 2);
  EXPECT_EQ(PathFor(gamma), ForwardPath::kGeneral);
  // Another output dtype.
  ForwardSegment widened = Contiguous(DType::kBF16, 9, 2049);
  widened.out_dtype = DType::kF32;
  widened.out = At(1, 0);
  EXPECT_EQ(PathFor(widened), ForwardPath::kGeneral);
  // x not on an element boundary.
  ForwardSegment odd = Contiguous(DType::kBF16, 9, 2049);
  odd.x = At(0, 1);
  odd.out = At(1, 1);
  EXPECT_EQ(PathFor(odd), ForwardPath::kGeneral);
}

TEST(ForwardSegments, PlansTooWideForTheRealigningKernelTakeAnother) {
  // Misaligned rows of whole chunks whose plan has four slots (bf16
  // H = 4096): the general kernel.
  const KernelPlan wide = PlanForward(4096, DType::kBF16);
  ASSERT_GT(wide.slots, kRealignMaxSlots);
  EXPECT_EQ(PathFor(Contiguous(DType::kBF16, 64, 4096, 1)), ForwardPath::kGeneral);
  // Rows with a partial chunk past kRealignMaxChunks chunks: the strided
  // plan, whose specialized kernel reads element by element at any
  // alignment (bf16 H = 12289 in a cluster, fp32 H = 8191 in a block).
  for (const auto& [dtype, hidden] :
       {std::pair{DType::kBF16, int64_t{12289}}, std::pair{DType::kF32, int64_t{8191}}}) {
    ASSERT_EQ(PlanForward(hidden, dtype).layout, Layout::kStrided);
    EXPECT_EQ(PathFor(Contiguous(dtype, 4, hidden)), ForwardPath::kLean);
    EXPECT_EQ(PathFor(Contiguous(dtype, 4, hidden, 3)), ForwardPath::kLean);
  }
}

TEST(ForwardSegments, EveryPlanWithAPartialChunkFitsTheRealigningKernelUpToItsChunks) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int64_t width = VectorWidth(dtype);
    for (int64_t hidden = 1; hidden <= kRealignMaxChunks * width; ++hidden) {
      if (hidden % width == 0) continue;
      const KernelPlan plan = PlanForward(hidden, dtype);
      ASSERT_EQ(ChooseForwardPath(plan, dtype, dtype, false, true, true), ForwardPath::kRealign)
          << DTypeName(dtype) << " H=" << hidden << " slots " << plan.slots;
    }
  }
}

TEST(ForwardSegments, TheKernelFamilyIsPartOfTheLaunchKey) {
  const ForwardSegment aligned = Contiguous(DType::kBF16, 1, 256);
  const ForwardSegment misaligned = Contiguous(DType::kBF16, 1, 256, 1);
  const KernelPlan plan = PlanForward(256, DType::kBF16);
  const ForwardPath a = SegmentPath(aligned, plan);
  const ForwardPath b = SegmentPath(misaligned, plan);
  ASSERT_NE(a, b);
  EXPECT_NE(SegmentLaunchKey(aligned, plan, a), SegmentLaunchKey(misaligned, plan, b));
  EXPECT_EQ(ToDeviceSegment(aligned, plan, 0).vectorized, 1);
  EXPECT_EQ(ToDeviceSegment(misaligned, plan, 0).vectorized, 0);
}

// Realigned rows with a residual take ForwardRealignKernel, those without
// ForwardRealignStagedKernel (realign_policy.h), so they never share a
// launch; on the vector plans' lean path a residual changes no kernel, nor
// the key (staged rows with one take the general path: the test above).
TEST(ForwardSegments, AResidualIsPartOfARealignedLaunchKey) {
  const auto with_residual = [](ForwardSegment s) {
    const int64_t bytes = reinterpret_cast<uintptr_t>(s.x) % 256;
    s.residual = At(4, bytes);
    s.residual_row_stride = s.x_row_stride;
    return s;
  };
  const ForwardSegment realigned = Contiguous(DType::kBF16, 9, 2049, 5);
  const KernelPlan realign_plan = PlanForward(2049, DType::kBF16);
  ASSERT_EQ(PathFor(realigned), ForwardPath::kRealign);
  ASSERT_EQ(PathFor(with_residual(realigned)), ForwardPath::kRealign);
  EXPECT_NE(SegmentLaunchKey(realigned, realign_plan, ForwardPath::kRealign),
            SegmentLaunchKey(with_residual(realigned), realign_plan, ForwardPath::kRealign));

  const ForwardSegment aligned = Contiguous(DType::kBF16, 9, 4096);
  const KernelPlan lean_plan = PlanForward(4096, DType::kBF16);
  ASSERT_EQ(PathFor(aligned), ForwardPath::kLean);
  ASSERT_EQ(PathFor(with_residual(aligned)), ForwardPath::kLean);
  EXPECT_EQ(SegmentLaunchKey(aligned, lean_plan, ForwardPath::kLean),
            SegmentLaunchKey(with_residual(aligned), lean_plan, ForwardPath::kLean));
}

// Segments share a launch exactly when their keys are equal, so two
// different launch configurations must never get the same key: every plan
// PlanForward makes (each distinct plan of every H once), with every op,
// parameter dtype and kernel family.
TEST(ForwardSegments, DifferentLaunchConfigurationsGetDifferentKeys) {
  using PlanFields = std::tuple<Layout, int, int, int, int, int>;
  using Config = std::tuple<DType, NormOp, PlanFields, DType, ForwardPath>;
  std::map<uint64_t, Config> seen;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::set<PlanFields> plans;
    for (int64_t hidden = 1; hidden <= kMaxHidden; ++hidden) {
      const KernelPlan plan = PlanForward(hidden, dtype);
      const PlanFields fields{plan.layout,      plan.slots,   plan.width,
                              plan.row_threads, plan.cluster, plan.block_threads};
      if (!plans.insert(fields).second) continue;
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        for (DType param_dtype : {dtype, DType::kF32}) {
          for (ForwardPath path :
               {ForwardPath::kGeneral, ForwardPath::kLean, ForwardPath::kRealign}) {
            ForwardSegment s = Contiguous(dtype, 1, hidden);
            s.op = op;
            s.param_dtype = param_dtype;
            const Config config{dtype, op, fields, param_dtype, path};
            const auto [it, inserted] = seen.emplace(SegmentLaunchKey(s, plan, path), config);
            ASSERT_TRUE(inserted || it->second == config)
                << DTypeName(dtype) << " H=" << hidden << ": key shared with another configuration";
          }
        }
      }
    }
  }
  EXPECT_GT(seen.size(), 100u);
}

}  // namespace
}  // namespace normsvc::kernels::detail
