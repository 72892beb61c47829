// ForwardRealignStagedKernel (rows staged in shared memory, read at their
// offset; realign_policy.h) against the double reference and, bit for bit,
// against ForwardRealignKernel on what it serves: segments without a
// residual, alone, alone in a group of a multi-segment launch, or a group of
// several (the segment table); many row groups a block, and rows written in
// place. The launch
// counters say which kernel served each case.
#include <algorithm>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_forward_realign_support.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "normsvc/kernels/gpu.h"
#include "realign_policy.h"

namespace normsvc::kernels::testing {
namespace {

// Runs the case alone under `policy` (realign_policy.h); the launch counters
// say which realigning kernel served it.
std::vector<uint8_t> RunUnderPolicy(ForwardCase& c, detail::RealignPolicy policy) {
  c.PoisonOutputs();
  const int64_t shifted = detail::RealignForwardLaunches();
  const int64_t staged = detail::StagedRealignForwardLaunches();
  Status st;
  {
    const ScopedRealignPolicy scoped(policy);
    st = LaunchForwardSegment(c.Segment(), nullptr);
  }
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const bool is_staged = policy == detail::RealignPolicy::kStaged;
  EXPECT_EQ(detail::StagedRealignForwardLaunches() - staged, is_staged ? 1 : 0)
      << Describe(c.spec());
  EXPECT_EQ(detail::RealignForwardLaunches() - shifted, is_staged ? 0 : 1) << Describe(c.spec());
  return c.DenseOutputBytes();
}

// The staged realigning kernel (rows staged in shared memory, read at their
// offset) against the double reference and, bit for bit, against the
// shifting one, on what it serves (one segment, no residual): every row
// offset, both ops, every affine combination, fp32 parameters of 16-bit
// rows, rows of a few threads to a block, one row (whose last chunk is the
// segment's: element by element) to many.
TEST(ForwardRealignStaged, MatchesReferenceAndTheShiftingKernelBitForBit) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged realign forward");
  int variant = 0;
  int served = 0;
  // Rows of fewer than 16 bytes (fp32 H <= 3, 16-bit H <= 7) too, whose
  // aligned chunks reach past the next row, and past the tensor's end.
  for (int64_t hidden : {1, 3, 5, 7, 13, 33, 255, 256, 513, 1001, 2049, 4095, 8191}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t rows : {int64_t{1}, int64_t{3}, hidden <= 1024 ? int64_t{1001} : int64_t{203}}) {
        ++variant;
        ForwardSpec spec = VariedRealignSpec(variant, dtype, hidden,
                                             std::min(rows, MaxCaseElements() / hidden + 2));
        spec.stats = (variant / 2) % 2 == 0;  // both ops with and without
        if (!Misaligned(spec) || !RealignServes(spec)) continue;
        ++served;
        ForwardCase c(spec, rng);
        c.Upload();
        const std::vector<uint8_t> shifted = RunUnderPolicy(c, detail::RealignPolicy::kShift);
        const std::vector<uint8_t> staged = RunUnderPolicy(c, detail::RealignPolicy::kStaged);
        c.Check("staged realigning kernel");
        EXPECT_EQ(staged, shifted) << Describe(spec);
      }
    }
  }
  EXPECT_GT(served, 40);
}

// More row groups than fit at once, so that every block loops over many
// (the stages alternate, each refilled while the other is read), against
// the shifting kernel bit for bit.
TEST(ForwardRealignStaged, ManyRowGroupsABlock) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged realign many rows");
  for (const ManyRowShape& shape : kManyRowShapes) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      ForwardSpec spec = ManyRowSpec(shape, op);
      ASSERT_TRUE(Misaligned(spec) && RealignServes(spec)) << Describe(spec);
      ForwardCase c(spec, rng);
      c.Upload();
      const std::vector<uint8_t> shifted = RunUnderPolicy(c, detail::RealignPolicy::kShift);
      const std::vector<uint8_t> staged = RunUnderPolicy(c, detail::RealignPolicy::kStaged);
      c.Check("staged realigning kernel, many rows");
      EXPECT_EQ(staged, shifted) << Describe(spec);
    }
  }
}

// Out over x under the staged kernel: its rows' end chunks are copied whole
// (bytes of the neighbouring rows, which other blocks write, are read and
// dropped), so the in-place results must still be those of separate buffers.
TEST(ForwardRealignStaged, InPlace) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged realign in place");
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t hidden : {int64_t{13}, int64_t{2049}, int64_t{4095}}) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        const int64_t rows = std::min<int64_t>(1001, MaxCaseElements() / hidden + 2);
        const std::size_t offset_bytes = 3 * DTypeSize(dtype);
        HostTensor x(dtype, rows, hidden, hidden);
        x.FillNormal(rng, 0.3, 1.7);
        HostTensor gamma(dtype, 1, hidden, hidden);
        gamma.FillNormal(rng, 1.0, 0.5);
        const DeviceBuffer gamma_dev = gamma.ToDevice();
        DeviceBuffer x_dev(offset_bytes + x.bytes.size());
        std::vector<uint8_t> host(offset_bytes, 0x11);
        host.insert(host.end(), x.bytes.begin(), x.bytes.end());
        x_dev.Upload(host.data(), host.size());
        const DeviceBuffer out_dev(offset_bytes + x.bytes.size());
        ForwardSegment s;
        s.op = op;
        s.rows = rows;
        s.hidden = hidden;
        s.x_dtype = s.out_dtype = s.param_dtype = dtype;
        s.x = static_cast<char*>(x_dev.get()) + offset_bytes;
        s.x_row_stride = hidden;
        s.gamma = gamma_dev.get();
        s.out = static_cast<char*>(out_dev.get()) + offset_bytes;
        s.out_row_stride = hidden;
        const int64_t before = detail::StagedRealignForwardLaunches();
        const ScopedRealignPolicy scoped(detail::RealignPolicy::kStaged);
        ASSERT_TRUE(LaunchForwardSegment(s, nullptr).ok());
        s.out = static_cast<char*>(x_dev.get()) + offset_bytes;
        ASSERT_TRUE(LaunchForwardSegment(s, nullptr).ok());
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        EXPECT_EQ(detail::StagedRealignForwardLaunches(), before + 2);
        const std::vector<uint8_t> expected = out_dev.Download();
        const std::vector<uint8_t> got = x_dev.Download();
        EXPECT_TRUE(std::equal(got.begin() + static_cast<std::ptrdiff_t>(offset_bytes), got.end(),
                               expected.begin() + static_cast<std::ptrdiff_t>(offset_bytes)))
            << "out over x, " << NormOpName(op) << " " << DTypeName(dtype) << " H=" << hidden;
      }
    }
  }
}

// The groups of a multi-segment launch: a realigned segment alone in its
// group (no other segment shares its launch key) and a group of realigned
// segments without a residual (the segment table; two H of one plan) take
// the staged kernel, a group with a residual the shifting one, and an
// aligned segment neither; each segment gives the bits it gives alone under
// the shifting policy.
TEST(ForwardRealignStaged, GroupsOfAMultiSegmentLaunch) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged realign in a mixed launch");
  const auto spec_of = [](DType dtype, NormOp op, int64_t rows, int64_t hidden, int64_t offset) {
    ForwardSpec spec;
    spec.op = op;
    spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
    spec.rows = rows;
    spec.hidden = hidden;
    spec.offset = offset;
    spec.stats = true;
    return spec;
  };
  ForwardSpec with_residual = spec_of(DType::kBF16, NormOp::kLayerNorm, 77, 4095, 3);
  with_residual.residual = with_residual.residual_out = true;
  ForwardSpec with_residual_one_row = with_residual;
  with_residual_one_row.rows = 1;
  const std::vector<ForwardSpec> specs = {
      spec_of(DType::kBF16, NormOp::kLayerNorm, 301, 2049, 3),  // a group of one: staged
      spec_of(DType::kF16, NormOp::kRmsNorm, 1000, 33, 5),      // a group of one: staged
      spec_of(DType::kBF16, NormOp::kLayerNorm, 64, 4096, 0),   // aligned: no realigning
      spec_of(DType::kF32, NormOp::kRmsNorm, 97, 2049, 1),      // a table of two: staged
      spec_of(DType::kF32, NormOp::kRmsNorm, 5, 2051, 2),       // (513 chunks, the same plan)
      with_residual,                                            // a table of two: shifting
      with_residual_one_row,
  };
  std::vector<std::unique_ptr<ForwardCase>> cases;
  std::vector<std::vector<uint8_t>> alone;
  std::vector<ForwardSegment> segments;
  for (const ForwardSpec& spec : specs) {
    ASSERT_TRUE(spec.hidden == 4096 ? !Misaligned(spec) : RealignServes(spec)) << Describe(spec);
    cases.push_back(std::make_unique<ForwardCase>(spec, rng));
    ForwardCase& c = *cases.back();
    c.Upload();
    c.PoisonOutputs();
    {
      const ScopedRealignPolicy scoped(detail::RealignPolicy::kShift);
      ASSERT_TRUE(LaunchForwardSegment(c.Segment(), nullptr).ok()) << Describe(spec);
    }
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    alone.push_back(c.DenseOutputBytes());
    c.PoisonOutputs();
    segments.push_back(c.Segment());
  }
  ASSERT_EQ(detail::PlanForward(2049, DType::kF32).slots,
            detail::PlanForward(2051, DType::kF32).slots);

  DeviceBuffer workspace(ForwardWorkspaceBytes(static_cast<int>(segments.size())));
  const int64_t shifted = detail::RealignForwardLaunches();
  const int64_t staged = detail::StagedRealignForwardLaunches();
  {
    const ScopedRealignPolicy scoped(detail::RealignPolicy::kStaged);
    const Status st = LaunchForward(segments.data(), static_cast<int>(segments.size()),
                                    workspace.get(), workspace.bytes(), nullptr, nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  EXPECT_EQ(detail::StagedRealignForwardLaunches() - staged, 3);
  EXPECT_EQ(detail::RealignForwardLaunches() - shifted, 1);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cases[i]->Check("in a mixed launch under the staged policy");
    EXPECT_EQ(cases[i]->DenseOutputBytes(), alone[i]) << Describe(specs[i]);
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
