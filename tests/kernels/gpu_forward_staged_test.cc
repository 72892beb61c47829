// The staged forward kernel (one segment, H not a multiple of the vector
// width, no residual: rows moved into shared memory by asynchronous copies)
// against the double reference and, bit for bit, against the same rows
// inside a multi-segment launch (which takes the register kernel: the
// launch counter says which kernel served each); and chains of
// forward launches that may start early (programmatic dependent launch):
// each reads what the previous one wrote.
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

// Runs the case alone and expects the staged kernel to have served it.
std::vector<uint8_t> RunStagedAlone(ForwardCase& c) {
  c.PoisonOutputs();
  const int64_t before = detail::StagedForwardLaunches();
  const Status st = LaunchForwardSegment(c.Segment(), nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(detail::StagedForwardLaunches(), before + 1) << Describe(c.spec());
  return c.OutputBytes();
}

// One case alone, checked against the double reference.
void RunAndCheckStaged(const ForwardSpec& spec, std::mt19937_64& rng, const char* label) {
  ForwardCase c(spec, rng);
  c.Upload();
  RunStagedAlone(c);
  c.Check(label);
}

// Every row alignment (offsets 0..8 elements, padded pitches), both ops,
// every affine combination, fp32 parameters for 16-bit activations, and row
// counts that leave the last block's groups partly empty and make blocks
// loop over many rows.
TEST(ForwardStaged, MatchesReferenceAndTheSegmentTableBitForBit) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged forward");
  std::vector<std::unique_ptr<ForwardCase>> cases;
  int variant = 0;
  for (int64_t hidden : {33, 513, 1001, 2049, 4095, 8191}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      ++variant;
      ForwardSpec spec;
      spec.op = variant % 2 ? NormOp::kLayerNorm : NormOp::kRmsNorm;
      spec.x_dtype = spec.out_dtype = dtype;
      spec.param_dtype = dtype != DType::kF32 && variant % 3 == 0 ? DType::kF32 : dtype;
      spec.rows = hidden <= 1001 ? 2001 : 411;
      spec.hidden = hidden;
      spec.offset = variant % 9;
      spec.x_pad = variant % 4;
      spec.out_pad = (variant + 1) % 3;
      spec.gamma = variant % 4 != 3;
      spec.beta = variant % 5 != 4;
      spec.stats = variant % 2 == 0;
      cases.push_back(std::make_unique<ForwardCase>(spec, rng));
      cases.back()->Upload();
    }
  }
  std::vector<std::vector<uint8_t>> alone;
  for (auto& c : cases) {
    alone.push_back(RunStagedAlone(*c));
    c->Check("staged, alone");
  }

  // Each case with a one-row companion of the same op, dtypes and H: segments
  // that share a kernel and launch shape share a launch, so no case is alone
  // in its launch and the segment table's register kernel serves it.
  std::vector<std::unique_ptr<ForwardCase>> companions;
  std::vector<ForwardSegment> segments;
  for (auto& c : cases) {
    ForwardSpec spec = c->spec();
    spec.rows = 1;
    spec.offset = (spec.offset + 1) % 9;
    companions.push_back(std::make_unique<ForwardCase>(spec, rng));
    companions.back()->Upload();
    companions.back()->PoisonOutputs();
    c->PoisonOutputs();
    segments.push_back(c->Segment());
    segments.push_back(companions.back()->Segment());
  }
  DeviceBuffer workspace(ForwardWorkspaceBytes(static_cast<int>(segments.size())));
  const int64_t staged_before = detail::StagedForwardLaunches();
  const Status st = LaunchForward(segments.data(), static_cast<int>(segments.size()),
                                  workspace.get(), workspace.bytes(), nullptr, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  EXPECT_EQ(detail::StagedForwardLaunches(), staged_before);
  for (auto& c : companions) c->Check("companion in the mixed launch");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i]->OutputBytes(), alone[i]) << Describe(cases[i]->spec());
  }
}

// Enough rows that every block loops over many more rows than it has
// stages: the ring of row images is refilled while rows are normalized.
TEST(ForwardStaged, ManyRowsPerBlock) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged many rows");
  struct Shape {
    int64_t hidden, rows;
    DType dtype;
  };
  for (const Shape& shape : {Shape{33, 60000, DType::kBF16}, Shape{2049, 9000, DType::kBF16},
                             Shape{2049, 9000, DType::kF32}, Shape{8191, 1500, DType::kF16}}) {
    ForwardSpec spec;
    spec.op = shape.hidden == 2049 ? NormOp::kLayerNorm : NormOp::kRmsNorm;
    spec.x_dtype = spec.out_dtype = spec.param_dtype = shape.dtype;
    spec.rows = shape.rows;
    spec.hidden = shape.hidden;
    spec.offset = 3;
    spec.stats = true;
    RunAndCheckStaged(spec, rng, "staged, many rows a block");
  }
}

// One row, and fewer rows than a block's groups: the pipeline's prologue
// covers every row, and the empty groups' images are never read.
TEST(ForwardStaged, FewRows) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("staged few rows");
  for (int64_t rows : {1, 2, 3, 5}) {
    for (int64_t hidden : {513, 2049}) {
      ForwardSpec spec;
      spec.x_dtype = spec.out_dtype = spec.param_dtype = DType::kBF16;
      spec.rows = rows;
      spec.hidden = hidden;
      spec.offset = rows;
      spec.stats = true;
      RunAndCheckStaged(spec, rng, "staged, few rows");
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
    for (int i = 0; i < kLinks; ++i) {
      ASSERT_TRUE(LaunchForwardSegment(segment(i), nullptr).ok());
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
    }
    const std::vector<uint8_t> expected = links[kLinks].Download();

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
