// Backward on the GPU against the double reference, over the same matrix as
// the forward test (op x dtype x H x rows, rows x H <= 2^24), and run-to-run
// bitwise determinism of dx, dgamma and dbeta (the case and its metric:
// gpu_backward_case.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_backward_case.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"
#include "normsvc/kernels/reference.h"

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
// PlanBackwardUnits on these shapes, checked in backward_unit_plan_test.cc): more
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

// The staged kernels that load saved statistics kStatisticsBatch rows at a
// time (a lane each, handed out by shuffles, the next batch loaded during a
// batch's last row: fp32 rows in clusters of blocks of 1,024 and RMSNorm's
// 16-bit rows of two chunks a thread in clusters), with rows enough,
// counted from the unit planner, that every unit runs past two batches and
// into a third. dx, dgamma and dbeta against the double reference.
TEST(BackwardStatistics, BatchedStatisticsPastSeveralBatches) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward saved statistics batches");
  struct Case {
    NormOp op;
    DType dtype;
    int64_t hidden;
  };
  const Case cases[] = {{NormOp::kLayerNorm, DType::kF32, 32772},
                        {NormOp::kRmsNorm, DType::kF32, 32772},
                        {NormOp::kRmsNorm, DType::kBF16, 32776}};
  for (const Case& c : cases) {
    const detail::KernelPlan plan = detail::PlanBackward(c.hidden, c.dtype, c.op);
    ASSERT_TRUE(detail::BatchesSavedStatistics(plan, c.dtype, c.op)) << c.hidden;
    const int64_t iterations = 2 * detail::kStatisticsBatch + 3;
    const int64_t rows = detail::BackwardWaveUnits(plan, c.dtype) * iterations;
    ASSERT_GE(detail::PlanBackwardUnits(rows, c.hidden, c.dtype, c.op).rows_per_unit, iterations);
    BackwardSpec s;
    s.op = c.op;
    s.dtype = s.param_dtype = c.dtype;
    s.rows = rows;
    s.hidden = c.hidden;
    s.given_stats = true;
    RunAndCheck(s, rng);
  }
}

// The partials of 16-bit rows one a block (or a cluster): warps whose 32
// chunks are all in the row store them as runs of 512 bytes (shuffled),
// the others chunk by chunk. H = 6144: in-block rows of 512 threads, whole
// warps; 8200 and 16392: clusters whose last chunks leave warps partly past
// the row's end (1,025 and 2,049 chunks). dgamma and dbeta against the
// double reference.
TEST(BackwardPartials, SixteenBitWarpRunsAndRowEnds) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward 16-bit partial stores");
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t hidden : {int64_t{6144}, int64_t{8200}, int64_t{16392}}) {
      for (int64_t rows : {int64_t{3}, int64_t{300}}) {
        for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
          ASSERT_EQ(detail::PlanBackward(hidden, dtype, op).groups, 1) << hidden;
          BackwardSpec s;
          s.op = op;
          s.dtype = s.param_dtype = dtype;
          s.rows = rows;
          s.hidden = hidden;
          RunAndCheck(s, rng);
        }
      }
    }
  }
}

// fp32 rows of 8,193-16,384 chunks take the staged kernel in clusters of
// blocks of kStagedWideBackwardThreads (PlanBackward). H covers clusters of
// 5, 6 and 8 blocks: rows whose last block is partly past the row's end
// (32772: one chunk of its fifth block is in the row; 57348: one of its
// eighth) and one that fills its cluster (49152); 65536 is BackwardMatrix's.
// Saved and recomputed statistics, aligned rows and rows padded off the
// vector width; dx, dgamma and dbeta against the double reference.
TEST(BackwardWideClusters, Fp32RowsInBlocksOf1024) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward fp32 blocks of 1024");
  for (int64_t hidden : {int64_t{32772}, int64_t{49152}, int64_t{57348}}) {
    // fp32 plans are the same for both ops.
    const detail::KernelPlan plan = detail::PlanBackward(hidden, DType::kF32, NormOp::kRmsNorm);
    ASSERT_EQ(plan.block_threads, detail::kStagedWideBackwardThreads) << hidden;
    ASSERT_EQ(plan.cluster, hidden == 32772 ? 5 : hidden == 49152 ? 6 : 8) << hidden;
    for (int64_t rows : {int64_t{3}, int64_t{40}}) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        BackwardSpec s;
        s.op = op;
        s.rows = rows;
        s.hidden = hidden;
        s.given_stats = rows == 3;
        s.pad = rows == 3 ? 0 : 3;
        RunAndCheck(s, rng);
      }
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
  const Status st = LaunchBackward(a, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("BackwardWorkspaceBytes"), std::string::npos) << st.message();
  EXPECT_GT(BackwardWorkspaceBytes(1000, 4096), 0u);
  EXPECT_EQ(BackwardWorkspaceBytes(0, 4096), 0u);
}

constexpr float kBadEpsilons[] = {0.0f, -1e-5f, NAN, INFINITY};

// Epsilon is checked whatever else the call holds. An empty launch (rows =
// 0, no dgamma / dbeta: nothing to write and no workspace needed) is valid
// with epsilon 1e-5 and makes no CUDA call, so each bad epsilon is the only
// thing wrong with it; the error must name epsilon. Runs without a GPU too.
TEST(BackwardArguments, RejectsBadEpsilonOfAnEmptyLaunch) {
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    BackwardArgs a;
    a.op = op;
    a.rows = 0;
    a.hidden = 8;
    a.x = a.dy = reinterpret_cast<const void*>(0x1000);
    a.dx = reinterpret_cast<void*>(0x2000);
    a.x_row_stride = a.dy_row_stride = a.dx_row_stride = 8;
    a.epsilon = 1e-5f;
    const Status valid = LaunchBackward(a, nullptr, 0, nullptr);
    ASSERT_TRUE(valid.ok()) << valid.message();
    for (float epsilon : kBadEpsilons) {
      a.epsilon = epsilon;
      const Status st = LaunchBackward(a, nullptr, 0, nullptr);
      EXPECT_EQ(st.code(), Code::kInvalidArgument) << NormOpName(op) << " epsilon " << epsilon;
      EXPECT_NE(st.message().find("epsilon"), std::string::npos)
          << NormOpName(op) << " epsilon " << epsilon << ": " << st.message();
    }
  }
}

// The same on launches of real rows that are valid in every other respect:
// device buffers for everything, with dgamma and dbeta and a workspace of
// BackwardWorkspaceBytes, or with neither (no workspace needed); saved or
// recomputed statistics. Each bad epsilon is rejected with an error that
// names epsilon and writes nothing (dx, dgamma and dbeta keep the poison);
// epsilon 1e-5 then runs and writes dx.
TEST(BackwardArguments, RejectsBadEpsilonOfAnOtherwiseValidLaunch) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward epsilon check");
  constexpr int64_t kRows = 4, kHidden = 96;
  HostTensor x(DType::kF32, kRows, kHidden, kHidden), dy(DType::kF32, kRows, kHidden, kHidden);
  HostTensor gamma(DType::kF32, 1, kHidden, kHidden);
  x.FillNormal(rng, 0.3, 1.7);
  dy.FillNormal(rng, 0.0, 1.0);
  gamma.FillNormal(rng, 1.0, 0.5);
  const DeviceBuffer x_dev = x.ToDevice(), dy_dev = dy.ToDevice(), gamma_dev = gamma.ToDevice();
  const DeviceBuffer dx_dev(x.bytes.size()), dgamma_dev(kHidden * sizeof(float)),
      dbeta_dev(kHidden * sizeof(float)), workspace(BackwardWorkspaceBytes(kRows, kHidden));
  // LayerNorm's statistics, given to RMSNorm too (rstd only): the reference
  // the valid launch is compared with takes the same.
  std::vector<float> mean(kRows), rstd(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    const std::vector<double> row = x.Row(r);
    const RowResult stats = ReferenceForwardRow(NormOp::kLayerNorm, row.data(), nullptr, nullptr,
                                                nullptr, kHidden, 1e-5);
    mean[r] = static_cast<float>(stats.mean);
    rstd[r] = static_cast<float>(stats.rstd);
  }
  const DeviceBuffer mean_dev(kRows * sizeof(float)), rstd_dev(kRows * sizeof(float));
  mean_dev.Upload(mean.data(), kRows * sizeof(float));
  rstd_dev.Upload(rstd.data(), kRows * sizeof(float));
  constexpr uint8_t kPoison = 0x3c;
  const auto untouched = [&](const DeviceBuffer& b) {
    const std::vector<uint8_t> bytes = b.Download();
    return std::all_of(bytes.begin(), bytes.end(), [](uint8_t v) { return v == kPoison; });
  };
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    for (bool given_stats : {true, false}) {
      for (bool partials : {true, false}) {
        BackwardArgs a;
        a.op = op;
        a.rows = kRows;
        a.hidden = kHidden;
        a.x = x_dev.get();
        a.dy = dy_dev.get();
        a.dx = dx_dev.get();
        a.x_row_stride = a.dy_row_stride = a.dx_row_stride = kHidden;
        a.gamma = gamma_dev.get();
        a.mean =
            given_stats && op == NormOp::kLayerNorm ? static_cast<float*>(mean_dev.get()) : nullptr;
        a.rstd = given_stats ? static_cast<float*>(rstd_dev.get()) : nullptr;
        a.dgamma = partials ? static_cast<float*>(dgamma_dev.get()) : nullptr;
        a.dbeta =
            partials && op == NormOp::kLayerNorm ? static_cast<float*>(dbeta_dev.get()) : nullptr;
        void* const ws = partials ? workspace.get() : nullptr;
        const std::size_t ws_bytes = partials ? workspace.bytes() : 0;
        const std::string what = std::string(NormOpName(op)) +
                                 (given_stats ? " saved stats" : " recomputed stats") +
                                 (partials ? ", dgamma/dbeta" : ", dx only");
        for (float epsilon : kBadEpsilons) {
          for (const DeviceBuffer* b : {&dx_dev, &dgamma_dev, &dbeta_dev}) b->Poison(kPoison);
          a.epsilon = epsilon;
          const Status st = LaunchBackward(a, ws, ws_bytes, nullptr);
          EXPECT_EQ(st.code(), Code::kInvalidArgument) << what << ", epsilon " << epsilon;
          EXPECT_NE(st.message().find("epsilon"), std::string::npos)
              << what << ", epsilon " << epsilon << ": " << st.message();
          CUDA_ASSERT_OK(cudaDeviceSynchronize());
          EXPECT_TRUE(untouched(dx_dev) && untouched(dgamma_dev) && untouched(dbeta_dev))
              << what << ", epsilon " << epsilon << ": a rejected launch wrote its outputs";
        }
        for (const DeviceBuffer* b : {&dx_dev, &dgamma_dev, &dbeta_dev}) b->Poison(kPoison);
        a.epsilon = 1e-5f;
        const Status valid = LaunchBackward(a, ws, ws_bytes, nullptr);
        EXPECT_TRUE(valid.ok()) << what << ", epsilon 1e-5: " << valid.message();
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        // Against the reference on the same arguments (host copies), within
        // 1e-4 of the output's largest magnitude: a coarse check that the
        // valid launch ran (BackwardMatrix applies gpu_backward_case.h's metric).
        std::vector<float> dx_ref(kRows * kHidden), dgamma_ref(kHidden), dbeta_ref(kHidden);
        BackwardArgs host = a;
        host.x = x.bytes.data();
        host.dy = dy.bytes.data();
        host.gamma = gamma.bytes.data();
        host.mean = a.mean != nullptr ? mean.data() : nullptr;
        host.rstd = a.rstd != nullptr ? rstd.data() : nullptr;
        host.dx = dx_ref.data();
        host.dgamma = a.dgamma != nullptr ? dgamma_ref.data() : nullptr;
        host.dbeta = a.dbeta != nullptr ? dbeta_ref.data() : nullptr;
        const Status reference = ReferenceBackward(host);
        ASSERT_TRUE(reference.ok()) << reference.message();
        const auto expect_close = [&](const DeviceBuffer& buffer, const std::vector<float>& ref,
                                      const char* name) {
          const std::vector<uint8_t> bytes = buffer.Download();
          std::vector<float> got(ref.size());
          std::memcpy(got.data(), bytes.data(), ref.size() * sizeof(float));
          double scale = 1.0;
          for (float v : ref) scale = std::max(scale, std::fabs(static_cast<double>(v)));
          for (std::size_t i = 0; i < ref.size(); ++i) {
            if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= 1e-4 * scale)) {
              ADD_FAILURE() << what << ", epsilon 1e-5: " << name << "[" << i << "] " << got[i]
                            << " ref " << ref[i];
              return;
            }
          }
        };
        expect_close(dx_dev, dx_ref, "dx");
        if (a.dgamma != nullptr) expect_close(dgamma_dev, dgamma_ref, "dgamma");
        if (a.dbeta != nullptr) expect_close(dbeta_dev, dbeta_ref, "dbeta");
      }
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
