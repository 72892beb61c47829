// The backward's column reduction: the wide kernel (four columns a thread,
// several slices a thread) gives the narrow kernels' bits for every slice
// count it meets, and its results match the double reference; dropping the
// added partials from the L2 changes no bit.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "column_reduce.h"
#include "gpu_backward_case.h"
#include "gpu_test_support.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

// Sets a process-wide setting of the column reduction (its form, whether it
// drops its partials) for the scope, and restores it after.
template <typename T>
class ScopedSetting {
 public:
  ScopedSetting(T (*get)(), void (*set)(T), T value) : set_(set), before_(get()) { set_(value); }
  ~ScopedSetting() { set_(before_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  void (*set_)(T);
  T before_;
};

ScopedSetting<detail::ColumnReduceForm> ScopedForm(detail::ColumnReduceForm form) {
  return {detail::GetColumnReduceForm, detail::SetColumnReduceForm, form};
}
ScopedSetting<bool> ScopedDiscard(bool discard) {
  return {detail::GetDiscardPartials, detail::SetDiscardPartials, discard};
}

struct ReductionCase {
  DType dtype;
  int64_t hidden;
  int64_t rows;
  int64_t out_offset;  // floats before dgamma's and dbeta's first column
};

// Unit counts (PlanBackwardUnits) and the slices they give
// (ColumnReduceSlices): 132 units, 32 slices of 4-5 units (two batches of
// loads a slice, four slices a thread); 125 units, 32 slices of 3-4; 63
// units, 16 slices (two a thread); 37 and 20 rows, 10 and 5 slices (one or
// two a thread, fewer than 8 slice threads); 29 units of bf16 65536, 8
// slices. H = 20 and 4100 leave the last block of 128 columns partly outside
// the row; an output offset of one float leaves dgamma and dbeta off a
// 16-byte boundary.
constexpr ReductionCase kCases[] = {
    {DType::kF32, 20, 12672, 0},    {DType::kF32, 4100, 1000, 1}, {DType::kBF16, 4100, 1000, 0},
    {DType::kF32, 4096, 37, 0},     {DType::kF32, 4096, 20, 1},   {DType::kBF16, 65536, 58, 0},
    {DType::kBF16, 16384, 1024, 0},
};

// What a run may change from the default: the op (RMSNorm: dgamma alone, one
// array of partials), another workspace than the case's own and its poison
// byte (-1: the outputs' `poison`), and a buffer overwritten between the
// poisoning and the launch (larger than the L2: the workspace's poison is
// then in DRAM, not in dirty L2 lines).
struct RunSetup {
  NormOp op = NormOp::kLayerNorm;
  const DeviceBuffer* workspace = nullptr;
  int workspace_poison = -1;
  const DeviceBuffer* l2_flush = nullptr;
};

// One case's inputs on the device (random x, dy and gamma; saved statistics
// made up per row, since only the two forms' bits are compared), and Run:
// dgamma then dbeta (LayerNorm) of a backward launch with `form`, the outputs
// and the workspace poisoned with `poison` first.
class ColumnReductionRun {
 public:
  ColumnReductionRun(const ReductionCase& c, std::mt19937_64& rng) : c_(c) {
    HostTensor x(c.dtype, c.rows, c.hidden, c.hidden), dy(c.dtype, c.rows, c.hidden, c.hidden);
    HostTensor gamma(c.dtype, 1, c.hidden, c.hidden);
    x.FillNormal(rng, 0.3, 1.7);
    dy.FillNormal(rng, 0.0, 1.0);
    gamma.FillNormal(rng, 1.0, 0.5);
    x_ = x.ToDevice();
    dy_ = dy.ToDevice();
    gamma_ = gamma.ToDevice();
    std::vector<float> mean(c.rows), rstd(c.rows);
    for (int64_t r = 0; r < c.rows; ++r) {
      mean[r] = static_cast<float>(0.3 + 0.01 * static_cast<double>(r % 7));
      rstd[r] = static_cast<float>(0.6 + 0.01 * static_cast<double>(r % 11));
    }
    mean_ = DeviceBuffer(c.rows * sizeof(float));
    rstd_ = DeviceBuffer(c.rows * sizeof(float));
    mean_.Upload(mean.data(), mean.size() * sizeof(float));
    rstd_.Upload(rstd.data(), rstd.size() * sizeof(float));
    dx_ = DeviceBuffer(x.bytes.size());
    out_ = DeviceBuffer((2 * c.hidden + 2 * c.out_offset) * sizeof(float));
    workspace_ = DeviceBuffer(BackwardWorkspaceBytes(c.rows, c.hidden));
  }

  std::vector<uint8_t> Run(detail::ColumnReduceForm form, uint8_t poison,
                           const RunSetup& setup = {}) {
    const auto scoped = ScopedForm(form);
    const DeviceBuffer& workspace = setup.workspace != nullptr ? *setup.workspace : workspace_;
    out_.Poison(poison);
    workspace.Poison(setup.workspace_poison >= 0 ? static_cast<uint8_t>(setup.workspace_poison)
                                                 : poison);
    if (setup.l2_flush != nullptr) setup.l2_flush->Poison(0x11);
    const bool layer_norm = setup.op == NormOp::kLayerNorm;
    float* const out = static_cast<float*>(out_.get());
    BackwardArgs a;
    a.op = setup.op;
    a.rows = c_.rows;
    a.hidden = c_.hidden;
    a.epsilon = 1e-5f;
    a.x_dtype = a.param_dtype = c_.dtype;
    a.x = x_.get();
    a.dy = dy_.get();
    a.x_row_stride = a.dy_row_stride = a.dx_row_stride = c_.hidden;
    a.gamma = gamma_.get();
    a.mean = layer_norm ? static_cast<const float*>(mean_.get()) : nullptr;
    a.rstd = static_cast<const float*>(rstd_.get());
    a.dx = dx_.get();
    a.dgamma = out + c_.out_offset;
    a.dbeta = layer_norm ? out + c_.out_offset + c_.hidden : nullptr;
    const Status st = LaunchBackward(a, workspace.get(), workspace.bytes(), nullptr);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return out_.Download();
  }

  // The bytes of dgamma then dbeta in a result of Run, and the guard floats
  // around them (out_offset before and after).
  std::vector<uint8_t> Outputs(const std::vector<uint8_t>& bytes) const {
    const auto begin = bytes.begin() + static_cast<std::ptrdiff_t>(c_.out_offset * sizeof(float));
    return std::vector<uint8_t>(begin,
                                begin + static_cast<std::ptrdiff_t>(2 * c_.hidden * sizeof(float)));
  }
  std::vector<uint8_t> Guards(const std::vector<uint8_t>& bytes) const {
    const std::size_t guard = c_.out_offset * sizeof(float);
    std::vector<uint8_t> guards(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(guard));
    guards.insert(guards.end(), bytes.end() - static_cast<std::ptrdiff_t>(guard), bytes.end());
    return guards;
  }

 private:
  ReductionCase c_;
  DeviceBuffer x_, dy_, gamma_, mean_, rstd_, dx_, out_, workspace_;
};

std::string Describe(const ReductionCase& c) {
  const detail::BackwardUnits units =
      detail::PlanBackwardUnits(c.rows, c.hidden, c.dtype, NormOp::kLayerNorm);
  return std::string(DTypeName(c.dtype)) + " rows=" + std::to_string(c.rows) +
         " H=" + std::to_string(c.hidden) + " units=" + std::to_string(units.units) +
         " slices=" + std::to_string(detail::ColumnReduceSlices(units.units)) +
         " out_offset=" + std::to_string(c.out_offset);
}

// Every case takes the kernel each form names (the wide one's launches are
// counted), and neither writes outside dgamma and dbeta (the guard floats
// keep their poison).
TEST(BackwardColumnReduction, WideKernelGivesTheNarrowKernelsBits) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward wide column reduction");
  // The unit counts above are the strided and staged plans'; bf16 4100 would
  // otherwise take BackwardRealignKernel (with its own units).
  const ScopedBackwardRealign strided(false);
  for (const ReductionCase& c : kCases) {
    ColumnReductionRun run(c, rng);
    const int64_t before = detail::WideColumnReductionLaunches();
    const std::vector<uint8_t> narrow_bytes = run.Run(detail::ColumnReduceForm::kNarrow, 0x7f);
    EXPECT_EQ(detail::WideColumnReductionLaunches(), before) << Describe(c);
    const std::vector<uint8_t> wide_bytes = run.Run(detail::ColumnReduceForm::kWide, 0x3c);
    EXPECT_EQ(detail::WideColumnReductionLaunches(), before + 1) << Describe(c);
    for (const auto& [bytes, poison] :
         {std::pair{&narrow_bytes, uint8_t{0x7f}}, std::pair{&wide_bytes, uint8_t{0x3c}}}) {
      for (uint8_t b : run.Guards(*bytes)) EXPECT_EQ(b, poison) << Describe(c);
    }
    const std::vector<uint8_t> narrow = run.Outputs(narrow_bytes);
    const std::vector<uint8_t> wide = run.Outputs(wide_bytes);
    ASSERT_EQ(narrow.size(), wide.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < narrow.size(); ++i) differing += narrow[i] != wide[i];
    EXPECT_EQ(differing, 0u) << Describe(c);
    // Neither left a column unwritten: no poison word in either result
    // (0x7f7f7f7f or 0x3c3c3c3c as a float; sums of random data are neither).
    for (const std::vector<uint8_t>* result : {&narrow, &wide}) {
      std::size_t poisoned = 0;
      for (std::size_t i = 0; i + 4 <= result->size(); i += 4) {
        uint32_t word;
        std::memcpy(&word, result->data() + i, 4);
        poisoned += word == 0x7f7f7f7fu || word == 0x3c3c3c3cu;
      }
      EXPECT_EQ(poisoned, 0u) << Describe(c);
    }
  }
}

// Whether float `f` of a workspace (cudaMalloc'd: 128-byte aligned) is in a
// 128-byte line a reduction may drop: rows of `hidden` partials whose
// reductions drop them (DiscardsPartials), and in them a line that lies
// whole in one row (dbeta's rows follow dgamma's) starting on a line
// boundary of that row, i.e. at a column that is a multiple of 32.
bool InDroppableLine(int64_t f, int64_t hidden) {
  const int64_t first = f / 32 * 32;
  const int64_t row = first / hidden;
  return detail::DiscardsPartials(hidden) && (first + 31) / hidden == row &&
         (row * hidden) % 32 == 0;
}

// Dropping the added partials from the L2 changes no bit of dgamma or
// dbeta, with either form and op (RMSNorm: one array of partials), whatever
// the rows' alignment to the 128-byte lines (H = 20: none dropped, below
// kDiscardPartialsMinHidden; H = 4100: rows that start inside a line; the
// dbeta rows of an odd unit count). Each run's workspace is poisoned and
// the L2 then flushed, so that DRAM holds the poison: a line dropped before
// every thread of its slice had read it reads back poison and the sums
// differ. After each run, every workspace float outside the lines the
// reductions may drop must still hold the partial the run with nothing
// dropped left there (a wrong line dropped would not). Each case runs three
// times. The floats of droppable lines that no longer hold their partials
// are counted (a recorded property: evidence that the lines were dropped;
// the instruction allows a device to keep them).
TEST(BackwardColumnReduction, DiscardedPartialsGiveTheSameBits) {
  NORMSVC_REQUIRE_GPU();
  EXPECT_TRUE(detail::GetDiscardPartials()) << "the default drops them";
  int l2_bytes = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), cudaSuccess);
  const DeviceBuffer l2_flush(2 * static_cast<std::size_t>(l2_bytes));
  std::mt19937_64 rng = SeededRng("backward column reduction discard");
  const ScopedBackwardRealign strided(false);
  int64_t dropped_floats_changed = 0;
  for (const ReductionCase& c : kCases) {
    ColumnReductionRun run(c, rng);
    const DeviceBuffer kept_workspace(BackwardWorkspaceBytes(c.rows, c.hidden));
    const DeviceBuffer dropped_workspace(BackwardWorkspaceBytes(c.rows, c.hidden));
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      for (detail::ColumnReduceForm form :
           {detail::ColumnReduceForm::kNarrow, detail::ColumnReduceForm::kWide}) {
        const std::string where = Describe(c) + " op " + std::to_string(static_cast<int>(op)) +
                                  " form " + std::to_string(static_cast<int>(form));
        std::vector<uint8_t> kept;
        std::vector<uint8_t> kept_partials;
        {
          const auto keep = ScopedDiscard(false);
          kept = run.Outputs(run.Run(form, 0x5a, {op, &kept_workspace, 0x5a, nullptr}));
          kept_partials = kept_workspace.Download();
        }
        for (int repeat = 0; repeat < 3; ++repeat) {
          const uint8_t poison = repeat % 2 == 0 ? 0x7f : 0x3c;
          const auto discard = ScopedDiscard(true);
          const std::vector<uint8_t> dropped =
              run.Outputs(run.Run(form, poison, {op, &dropped_workspace, 0x5a, &l2_flush}));
          ASSERT_EQ(kept.size(), dropped.size());
          // RMSNorm writes dgamma alone: dbeta's place holds each run's poison.
          const std::size_t written = (op == NormOp::kLayerNorm ? 2 : 1) *
                                      static_cast<std::size_t>(c.hidden) * sizeof(float);
          std::size_t differing = 0;
          for (std::size_t i = 0; i < written; ++i) differing += kept[i] != dropped[i];
          EXPECT_EQ(differing, 0u) << where << " repeat " << repeat;
          const std::vector<uint8_t> partials = dropped_workspace.Download();
          ASSERT_EQ(partials.size(), kept_partials.size());
          int64_t kept_lines_changed = 0;
          for (std::size_t f = 0; f + 4 <= partials.size(); f += 4) {
            if (std::memcmp(&partials[f], &kept_partials[f], 4) == 0) continue;
            if (InDroppableLine(static_cast<int64_t>(f / 4), c.hidden)) {
              ++dropped_floats_changed;
            } else {
              ++kept_lines_changed;
            }
          }
          EXPECT_EQ(kept_lines_changed, 0) << where << " repeat " << repeat;
        }
      }
    }
  }
  RecordProperty("dropped_floats_changed", std::to_string(dropped_floats_changed));
  std::printf("floats of droppable lines that no longer held their partials: %lld\n",
              static_cast<long long>(dropped_floats_changed));
}

// The wide kernel's results against the double reference (and run to run),
// through the backward test case, on shapes of several slice counts.
TEST(BackwardColumnReduction, WideKernelMatchesDoubleReference) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward wide column reduction reference");
  const auto wide = ScopedForm(detail::ColumnReduceForm::kWide);
  const ScopedBackwardRealign strided(false);
  for (const ReductionCase& c : {kCases[1], kCases[2], kCases[4], kCases[5]}) {
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

}  // namespace
}  // namespace normsvc::kernels::testing
