// The realigning forward kernels (rows that do not start on a 16-byte
// boundary: H not a multiple of the vector width, misaligned bases and
// pitches): ForwardRealignKernel and, for one-segment launches without a
// residual, ForwardRealignStagedKernel (realign_policy.h), against the
// double reference and, bit for bit, against each other, against the
// general kernel on the same inputs and against the same rows inside a
// multi-segment launch (the launch counters say which kernel served each);
// rows written in place; and chains of forward launches that may start
// early (programmatic dependent launch): each reads what the previous one
// wrote.
#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "forward_segments.h"
#include "gpu_forward_case.h"
#include "gpu_forward_realign_support.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"
#include "realign_policy.h"

namespace normsvc::kernels::testing {
namespace {

// Runs the case alone under the default policy; `realign` says whether a
// realigning kernel must serve it: the staged one when there is no
// residual, else the shifting one.
std::vector<uint8_t> RunAlone(ForwardCase& c, bool realign) {
  c.PoisonOutputs();
  const int64_t shifted = detail::RealignForwardLaunches();
  const int64_t staged = detail::StagedRealignForwardLaunches();
  const Status st = LaunchForwardSegment(c.Segment(), nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const bool is_staged = realign && !c.spec().residual;
  EXPECT_EQ(detail::StagedRealignForwardLaunches() - staged, is_staged ? 1 : 0)
      << Describe(c.spec());
  EXPECT_EQ(detail::RealignForwardLaunches() - shifted, realign && !is_staged ? 1 : 0)
      << Describe(c.spec());
  return c.DenseOutputBytes();
}

// One case alone, against the double reference.
void RunAndCheck(const ForwardSpec& spec, std::mt19937_64& rng, const char* label) {
  ForwardCase c(spec, rng);
  c.Upload();
  RunAlone(c, RealignServes(spec));
  c.Check(label);
}

// Every row offset (0..8 elements, pitches padded so that they share it or
// not), both ops, every affine combination, the residual with and without
// residual_out, fp32 parameters for 16-bit activations, one-thread rows
// (H < 8) up to rows of a whole block, and H a multiple of the vector width
// on misaligned rows (256: the realigning kernel; 1024: four slots, the
// general kernel); fp32 8191 is past the realigning kernel's reach (strided).
// Each case runs three ways: alone, with its out rows one element further
// apart (its rows no longer share their offsets: the general kernel, or the
// strided one), and beside a one-row companion in one multi-segment launch
// (the segment table). All three must give the same bits.
TEST(ForwardRealign, MatchesReferenceTheGeneralKernelAndTheSegmentTable) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("realign forward");
  std::vector<std::unique_ptr<ForwardCase>> cases;
  std::vector<std::vector<uint8_t>> alone;
  int variant = 0;
  for (int64_t hidden : {5, 13, 33, 255, 256, 513, 1001, 1024, 2049, 4095, 8191}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      ++variant;
      ForwardSpec spec = VariedRealignSpec(variant, dtype, hidden, hidden <= 1024 ? 1001 : 203);
      spec.residual = variant % 3 == 1;
      spec.residual_out = spec.residual && variant % 2 == 0;
      spec.stats = variant % 2 == 0;
      ASSERT_TRUE(Misaligned(spec)) << Describe(spec);

      std::mt19937_64 same_inputs = rng;
      cases.push_back(std::make_unique<ForwardCase>(spec, rng));
      ForwardCase& c = *cases.back();
      c.Upload();
      alone.push_back(RunAlone(c, RealignServes(spec)));
      c.Check("realigned, alone");

      ForwardSpec general_spec = spec;
      general_spec.out_pad = spec.out_pad + 1;
      ForwardCase general(general_spec, same_inputs);
      general.Upload();
      EXPECT_EQ(RunAlone(general, false), alone.back())
          << "rows that do not share their offsets: " << Describe(spec);
    }
  }

  // Each case with a one-row companion of the same op, dtypes, H and row
  // offset (so the same kernel): segments of one plan and kernel share a
  // launch, so no case is alone in its launch and the segment table serves
  // it.
  std::vector<std::unique_ptr<ForwardCase>> companions;
  std::vector<ForwardSegment> segments;
  for (auto& c : cases) {
    ForwardSpec spec = c->spec();
    spec.rows = 1;
    companions.push_back(std::make_unique<ForwardCase>(spec, rng));
    companions.back()->Upload();
    companions.back()->PoisonOutputs();
    c->PoisonOutputs();
    segments.push_back(c->Segment());
    segments.push_back(companions.back()->Segment());
  }
  // One launch per launch key (forward_segments.h): the shifting kernel's
  // for realigned keys with a residual, the staged kernel's for those
  // without (realign_policy.h).
  std::set<uint64_t> shifted_keys;
  std::set<uint64_t> staged_keys;
  for (const ForwardSegment& segment : segments) {
    const detail::KernelPlan plan = detail::PlanForward(segment.hidden, segment.x_dtype);
    const detail::ForwardPath path = detail::SegmentPath(segment, plan);
    if (path == detail::ForwardPath::kRealign) {
      (segment.residual != nullptr ? shifted_keys : staged_keys)
          .insert(detail::SegmentLaunchKey(segment, plan, path));
    }
  }
  ASSERT_FALSE(shifted_keys.empty());
  ASSERT_FALSE(staged_keys.empty());
  DeviceBuffer workspace(ForwardWorkspaceBytes(static_cast<int>(segments.size())));
  const int64_t realign_before = detail::RealignForwardLaunches();
  const int64_t staged_before = detail::StagedRealignForwardLaunches();
  const Status st = LaunchForward(segments.data(), static_cast<int>(segments.size()),
                                  workspace.get(), workspace.bytes(), nullptr, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  EXPECT_EQ(detail::RealignForwardLaunches() - realign_before,
            static_cast<int64_t>(shifted_keys.size()));
  EXPECT_EQ(detail::StagedRealignForwardLaunches() - staged_before,
            static_cast<int64_t>(staged_keys.size()));
  for (auto& c : companions) c->Check("companion in the mixed launch");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i]->DenseOutputBytes(), alone[i]) << Describe(cases[i]->spec());
  }
}

// Enough rows that every block loops over many rows (the grid is capped),
// and the shapes of the benchmark, with a residual and its sum written out:
// the shifting kernel (the staged one's many rows without a residual are
// ForwardRealignStaged.ManyRowGroupsABlock's).
TEST(ForwardRealign, ManyRowsWithAResidual) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("realign many rows");
  for (const ManyRowShape& shape : kManyRowShapes) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      ForwardSpec spec = ManyRowSpec(shape, op);
      spec.residual = spec.residual_out = true;
      RunAndCheck(spec, rng, "realigned, many rows");
    }
  }
}

// One row, and fewer rows than a block's groups.
TEST(ForwardRealign, FewRows) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("realign few rows");
  for (int64_t rows : {1, 2, 3, 5}) {
    for (int64_t hidden : {7, 513, 2049}) {
      ForwardSpec spec;
      spec.x_dtype = spec.out_dtype = spec.param_dtype = DType::kBF16;
      spec.rows = rows;
      spec.hidden = hidden;
      spec.offset = rows;
      spec.stats = true;
      RunAndCheck(spec, rng, "realigned, few rows");
    }
  }
}

// out over x, and residual_out over the residual: a thread stores aligned
// chunks that its neighbour loads, so the row's loads must all come first.
// The in-place results must be those of separate buffers.
TEST(ForwardRealign, InPlace) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("realign in place");
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // 13: rows of a few threads; 150 (fp32) and 300 (bf16): one warp of two
    // slots; 2049 and 4095: several warps. (fp32 300 is a 4-slot plan, which
    // the general kernel serves.)
    const int64_t one_warp = dtype == DType::kF32 ? 150 : 300;
    for (int64_t hidden : {int64_t{13}, one_warp, int64_t{2049}, int64_t{4095}}) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        const int64_t rows = 77;
        const int64_t offset = 3;
        HostTensor x(dtype, rows, hidden, hidden);
        x.FillNormal(rng, 0.3, 1.7);
        HostTensor residual(dtype, rows, hidden, hidden);
        residual.FillNormal(rng, 0.0, 1.0);
        HostTensor gamma(dtype, 1, hidden, hidden);
        gamma.FillNormal(rng, 1.0, 0.5);
        const DeviceBuffer gamma_dev = gamma.ToDevice();
        const std::size_t offset_bytes = static_cast<std::size_t>(offset) * DTypeSize(dtype);
        const auto upload_at_offset = [&](const HostTensor& t) {
          DeviceBuffer buffer(offset_bytes + t.bytes.size());
          std::vector<uint8_t> host(offset_bytes, 0x11);
          host.insert(host.end(), t.bytes.begin(), t.bytes.end());
          buffer.Upload(host.data(), host.size());
          return buffer;
        };
        const auto tensor = [&](const DeviceBuffer& b) {
          return static_cast<char*>(b.get()) + offset_bytes;
        };
        const DeviceBuffer x_dev = upload_at_offset(x);
        const DeviceBuffer residual_dev = upload_at_offset(residual);
        const DeviceBuffer out_dev(offset_bytes + x.bytes.size());
        const DeviceBuffer residual_out_dev(offset_bytes + x.bytes.size());
        ForwardSegment s;
        s.op = op;
        s.rows = rows;
        s.hidden = hidden;
        s.x_dtype = s.out_dtype = s.param_dtype = dtype;
        s.x = tensor(x_dev);
        s.x_row_stride = hidden;
        s.residual = tensor(residual_dev);
        s.residual_row_stride = hidden;
        s.residual_out = tensor(residual_out_dev);
        s.residual_out_row_stride = hidden;
        s.gamma = gamma_dev.get();
        s.out = tensor(out_dev);
        s.out_row_stride = hidden;
        ASSERT_EQ(detail::SegmentPath(s, detail::PlanForward(hidden, dtype)),
                  detail::ForwardPath::kRealign)
            << DTypeName(dtype) << " H=" << hidden << " does not exercise the realigning kernel";
        const int64_t before = detail::RealignForwardLaunches();
        ASSERT_TRUE(LaunchForwardSegment(s, nullptr).ok());
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        const std::vector<uint8_t> expected_out = out_dev.Download();
        const std::vector<uint8_t> expected_sum = residual_out_dev.Download();

        s.out = tensor(x_dev);
        s.residual_out = tensor(residual_dev);
        ASSERT_TRUE(LaunchForwardSegment(s, nullptr).ok());
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        EXPECT_EQ(detail::RealignForwardLaunches(), before + 2);
        const std::size_t tensor_bytes = x.bytes.size();
        const auto part = [&](const std::vector<uint8_t>& all) {
          return std::vector<uint8_t>(
              all.begin() + static_cast<std::ptrdiff_t>(offset_bytes),
              all.begin() + static_cast<std::ptrdiff_t>(offset_bytes + tensor_bytes));
        };
        EXPECT_EQ(part(x_dev.Download()), part(expected_out))
            << "out over x, " << NormOpName(op) << " H=" << hidden;
        EXPECT_EQ(part(residual_dev.Download()), part(expected_sum))
            << "residual_out over the residual, H=" << hidden;
      }
    }
  }
}

// Each launch normalizes the previous launch's output, in one stream and
// from a CUDA graph, with no synchronization between them; the result must
// be that of the same chain with the device synchronized after every
// launch. A launch that read before its predecessor had written would read
// the poison.
TEST(ForwardEarlyLaunch, ChainsSeeThePreviousOutput) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("early launch chain");
  constexpr int kLinks = 24;
  for (int64_t hidden : {2049, 4096, 65536}) {
    const int64_t rows = hidden == 65536 ? 2 : 3;
    HostTensor x(DType::kBF16, rows, hidden, hidden);
    x.FillNormal(rng, 0.3, 1.7);
    HostTensor gamma(DType::kBF16, 1, hidden, hidden);
    gamma.FillNormal(rng, 1.0, 0.5);
    const DeviceBuffer gamma_dev = gamma.ToDevice();
    std::vector<DeviceBuffer> links;
    links.push_back(x.ToDevice());
    for (int i = 0; i < kLinks; ++i) links.emplace_back(x.bytes.size());
    auto segment = [&](int i) {
      ForwardSegment s;
      s.op = i % 2 ? NormOp::kRmsNorm : NormOp::kLayerNorm;
      s.rows = rows;
      s.hidden = hidden;
      s.x_dtype = s.out_dtype = s.param_dtype = DType::kBF16;
      s.x = links[i].get();
      s.x_row_stride = hidden;
      s.gamma = gamma_dev.get();
      s.out = links[i + 1].get();
      s.out_row_stride = hidden;
      return s;
    };
    auto poison = [&] {
      for (int i = 1; i <= kLinks; ++i) links[i].Poison();
    };

    poison();
    const int64_t staged = detail::StagedRealignForwardLaunches();
    for (int i = 0; i < kLinks; ++i) {
      ASSERT_TRUE(LaunchForwardSegment(segment(i), nullptr).ok());
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
    }
    const std::vector<uint8_t> expected = links[kLinks].Download();
    // bf16 rows of 2049 are misaligned: the staged realigning kernel serves
    // the chain (the default policy).
    EXPECT_EQ(detail::StagedRealignForwardLaunches() - staged, hidden == 2049 ? kLinks : 0);

    cudaStream_t stream = nullptr;
    CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    poison();
    for (int i = 0; i < kLinks; ++i) ASSERT_TRUE(LaunchForwardSegment(segment(i), stream).ok());
    CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(links[kLinks].Download(), expected) << "stream chain, H=" << hidden;

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_ASSERT_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLinks; ++i) ASSERT_TRUE(LaunchForwardSegment(segment(i), stream).ok());
    CUDA_ASSERT_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_ASSERT_OK(cudaGraphInstantiate(&exec, graph, 0));
    poison();
    CUDA_ASSERT_OK(cudaGraphLaunch(exec, stream));
    CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(links[kLinks].Download(), expected) << "graph chain, H=" << hidden;
    CUDA_ASSERT_OK(cudaGraphExecDestroy(exec));
    CUDA_ASSERT_OK(cudaGraphDestroy(graph));
    CUDA_ASSERT_OK(cudaStreamDestroy(stream));
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
