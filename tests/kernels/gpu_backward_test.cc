// Backward on the GPU against the double reference, over the same matrix as
// the forward test (op x dtype x H x rows, rows x H <= 2^24), and run-to-run
// bitwise determinism of dx, dgamma and dbeta (the case and its metric:
// gpu_backward_case.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_backward_case.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

constexpr int64_t kHiddenSizes[] = {1, 5, 64, 128, 512, 768, 1024, 2049, 4096, 8191, 65536, 262144};
constexpr int64_t kRowCounts[] = {1, 3, 1000};

class BackwardMatrix : public ::testing::TestWithParam<std::tuple<NormOp, DType>> {};

// Variant A: saved statistics, gamma in the activation dtype, dgamma and
// dbeta, contiguous rows. Variant B: statistics recomputed, fp32 gamma,
// dgamma only, row strides off the vector width (misaligned rows).
TEST_P(BackwardMatrix, MatchesDoubleReferenceAndIsReproducible) {
  NORMSVC_REQUIRE_GPU();
  const auto [op, dtype] = GetParam();
  std::mt19937_64 rng =
      SeededRng(std::string("backward ") + NormOpName(op) + " " + DTypeName(dtype));
  for (int64_t hidden : kHiddenSizes) {
    for (int64_t rows : kRowCounts) {
      BackwardSpec a;
      a.op = op;
      a.dtype = a.param_dtype = dtype;
      a.rows = std::min(rows, std::max<int64_t>(1, MaxCaseElements() / hidden));
      a.hidden = hidden;
      RunAndCheck(a, rng);
      BackwardSpec b = a;
      b.param_dtype = DType::kF32;
      b.given_stats = false;
      b.dbeta = false;
      b.pad = 3;
      RunAndCheck(b, rng);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, BackwardMatrix,
                         ::testing::Combine(::testing::Values(NormOp::kLayerNorm, NormOp::kRmsNorm),
                                            ::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16)),
                         [](const ::testing::TestParamInfo<BackwardMatrix::ParamType>& param) {
                           return std::string(NormOpName(std::get<0>(param.param))) + "_" +
                                  DTypeName(std::get<1>(param.param));
                         });

// dx alone (no gamma, no dgamma/dbeta) and the largest hidden size.
TEST(BackwardOptions, NoParametersAndLargestHidden) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward options");
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    for (int64_t hidden : {int64_t{96}, int64_t{4096}, int64_t{12288}, kMaxHidden}) {
      BackwardSpec s;
      s.op = op;
      s.dtype = s.param_dtype = DType::kBF16;
      s.rows = hidden == kMaxHidden ? 2 : 33;
      s.hidden = hidden;
      s.gamma = s.dgamma = s.dbeta = hidden == kMaxHidden;
      s.given_stats = hidden != 4096;
      RunAndCheck(s, rng);
    }
  }
}

// The column reduction's two kernels and their edges (unit counts from
// PlanBackwardUnits on these shapes, checked in launch_plan_test.cc): more
// than 124 units take the many-units kernel (32 slices), fewer the few-units
// one (ColumnReduceSlices(units) slices); 528 units give each slice 17
// units; H % 32 != 0 leaves a block of the last columns partly outside the
// row.
TEST(BackwardColumnReduction, UnitCountsAndColumnTails) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward column reduction");
  struct Case {
    DType dtype;
    int64_t hidden;
    int64_t rows;
  };
  const Case cases[] = {
      {DType::kF32, 5, 16896},     // 528 units, 5 of a block's 32 columns in the row
      {DType::kF32, 20, 12672},    // 132 units
      {DType::kF32, 4100, 1000},   // 125 units, column tail
      {DType::kBF16, 4100, 1000},  // 63 units: the few-units kernel, column tail
      {DType::kBF16, 1027, 2000},  // 250 units, column tail
  };
  // The unit counts above are the strided and staged plans'; bf16 4100 and
  // 1027 would otherwise take BackwardRealignKernel (with its own units).
  const ScopedBackwardRealign strided(false);
  for (const Case& c : cases) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      BackwardSpec s;
      s.op = op;
      s.dtype = s.param_dtype = c.dtype;
      s.rows = c.rows;
      s.hidden = c.hidden;
      RunAndCheck(s, rng);
    }
  }
}

// Each backward launch takes the previous launch's dx as its dy, and every
// launch writes its partials into the same workspace, in one stream and
// from a CUDA graph with no synchronization between launches; dx and every
// launch's dgamma / dbeta must be those of the same chain with the device
// synchronized after every launch. The launches start early (programmatic
// dependent launch): a row pass that read dy before the previous launch had
// written it, or wrote partials while the previous column reduction still
// read them, gives other bits (or the poison). H covers the staged kernel in
// a block (1024) and across a cluster (16384), BackwardRealignKernel (2049)
// and the streamed one (262144).
TEST(BackwardEarlyLaunch, ChainsSeeThePreviousOutput) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward early launch chain");
  constexpr int kLinks = 12;
  for (int64_t hidden : {int64_t{1024}, int64_t{2049}, int64_t{16384}, int64_t{262144}}) {
    const int64_t rows = hidden >= 16384 ? 3 : 300;
    HostTensor x(DType::kBF16, rows, hidden, hidden), dy(DType::kBF16, rows, hidden, hidden);
    x.FillNormal(rng, 0.3, 1.0);
    dy.FillNormal(rng, 0.0, 1.0);
    HostTensor gamma(DType::kBF16, 1, hidden, hidden);
    gamma.FillNormal(rng, 1.0, 0.3);
    const DeviceBuffer x_dev = x.ToDevice(), gamma_dev = gamma.ToDevice();
    std::vector<DeviceBuffer> links;  // links[0] is dy; links[i + 1] launch i's dx
    links.push_back(dy.ToDevice());
    for (int i = 0; i < kLinks; ++i) links.emplace_back(x.bytes.size());
    std::vector<DeviceBuffer> sums;  // launch i's dgamma, then its dbeta
    for (int i = 0; i < kLinks; ++i) sums.emplace_back(2 * hidden * sizeof(float));
    const DeviceBuffer workspace(BackwardWorkspaceBytes(rows, hidden));
    auto args = [&](int i) {
      BackwardArgs a;
      a.op = i % 2 ? NormOp::kRmsNorm : NormOp::kLayerNorm;
      a.rows = rows;
      a.hidden = hidden;
      a.x_dtype = a.param_dtype = DType::kBF16;
      a.x = x_dev.get();
      a.dy = links[i].get();
      a.dx = links[i + 1].get();
      a.x_row_stride = a.dy_row_stride = a.dx_row_stride = hidden;
      a.gamma = gamma_dev.get();
      a.dgamma = static_cast<float*>(sums[i].get());
      a.dbeta = a.op == NormOp::kLayerNorm ? a.dgamma + hidden : nullptr;
      return a;
    };
    auto poison = [&] {
      for (int i = 1; i <= kLinks; ++i) links[i].Poison();
      for (const DeviceBuffer& b : sums) b.Poison();
      workspace.Poison();
    };
    auto results = [&] {
      std::vector<uint8_t> all = links[kLinks].Download();
      for (const DeviceBuffer& b : sums) {
        const std::vector<uint8_t> part = b.Download();
        all.insert(all.end(), part.begin(), part.end());
      }
      return all;
    };

    poison();
    for (int i = 0; i < kLinks; ++i) {
      ASSERT_TRUE(LaunchBackward(args(i), workspace.get(), workspace.bytes(), nullptr).ok());
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
    }
    const std::vector<uint8_t> expected = results();

    cudaStream_t stream = nullptr;
    CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    poison();
    for (int i = 0; i < kLinks; ++i) {
      ASSERT_TRUE(LaunchBackward(args(i), workspace.get(), workspace.bytes(), stream).ok());
    }
    CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(results() == expected) << "stream chain, H=" << hidden;

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_ASSERT_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLinks; ++i) {
      ASSERT_TRUE(LaunchBackward(args(i), workspace.get(), workspace.bytes(), stream).ok());
    }
    CUDA_ASSERT_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_ASSERT_OK(cudaGraphInstantiate(&exec, graph, 0));
    poison();
    CUDA_ASSERT_OK(cudaGraphLaunch(exec, stream));
    CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(results() == expected) << "graph chain, H=" << hidden;
    CUDA_ASSERT_OK(cudaGraphExecDestroy(exec));
    CUDA_ASSERT_OK(cudaGraphDestroy(graph));
    CUDA_ASSERT_OK(cudaStreamDestroy(stream));
  }
}

TEST(BackwardArguments, RejectsSmallWorkspace) {
  BackwardArgs a;
  a.rows = 4;
  a.hidden = 8;
  a.x = a.dy = reinterpret_cast<const void*>(0x1000);
  a.dx = reinterpret_cast<void*>(0x2000);
  a.x_row_stride = a.dy_row_stride = a.dx_row_stride = 8;
  a.dgamma = reinterpret_cast<float*>(0x3000);
  EXPECT_EQ(LaunchBackward(a, nullptr, 0, nullptr).code(), Code::kInvalidArgument);
  a.epsilon = 0.0f;
  EXPECT_EQ(LaunchBackward(a, nullptr, 0, nullptr).code(), Code::kInvalidArgument);
  EXPECT_GT(BackwardWorkspaceBytes(1000, 4096), 0u);
  EXPECT_EQ(BackwardWorkspaceBytes(0, 4096), 0u);
}

}  // namespace
}  // namespace normsvc::kernels::testing
