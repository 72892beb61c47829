// Backward on the GPU against the double reference, over the same matrix as
// the forward test (op x dtype x H x rows, rows x H <= 2^24), and run-to-run
// bitwise determinism of dx, dgamma and dbeta.
//
// Metric: with xhat, g = dy * gamma and the row means computed in double,
//   |dx - ref| <= 2e-5 * rstd * (|g| + mean|g| + |xhat| * (|mean(g xhat)| + mean|g xhat|))
//                 + ulp(ref) for fp16/bf16 dx
//   |dgamma - ref| <= 2e-5 * sum_rows |dy| (|xhat| + 1),   |dbeta - ref| <= 2e-5 * sum_rows |dy|
// (fp32 sums of many terms: the bound scales with the terms' magnitudes; the
// +1 covers xhat's absolute error from fp32 statistics when xhat is near 0).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "launch_plan.h"
#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/gpu.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::kernels::testing {
namespace {

constexpr int64_t kHiddenSizes[] = {1, 5, 64, 128, 512, 768, 1024, 2049, 4096, 8191, 65536, 262144};
constexpr int64_t kRowCounts[] = {1, 3, 1000};

struct BackwardSpec {
  NormOp op = NormOp::kLayerNorm;
  DType dtype = DType::kF32;
  DType param_dtype = DType::kF32;
  int64_t rows = 1;
  int64_t hidden = 1;
  int64_t pad = 0;         // extra elements per row of x, dy and dx
  int64_t offset = 0;      // elements before row 0 of x, dy and dx in their buffers
  int64_t dx_offset = -1;  // elements before dx's row 0 when not `offset` (-1: the same)
  bool gamma = true;
  bool given_stats = true;
  bool dgamma = true;
  bool dbeta = true;  // LayerNorm only
};

std::string Describe(const BackwardSpec& s) {
  std::ostringstream o;
  o << NormOpName(s.op) << " " << DTypeName(s.dtype) << " params=" << DTypeName(s.param_dtype)
    << " rows=" << s.rows << " H=" << s.hidden << " pad=" << s.pad << " offset=" << s.offset
    << (s.dx_offset >= 0 ? " dx_offset=" + std::to_string(s.dx_offset) : "")
    << (s.gamma ? " gamma" : "") << (s.given_stats ? " given-stats" : " recomputed-stats")
    << (s.dgamma ? " dgamma" : "") << (s.dbeta ? " dbeta" : "");
  return o.str();
}

// Runs one backward case twice and checks the results; returns max err/tol.
double RunAndCheck(const BackwardSpec& spec, std::mt19937_64& rng) {
  BackwardSpec s = spec;
  if (s.op == NormOp::kRmsNorm) s.dbeta = false;
  const int64_t h = s.hidden, stride = h + s.pad;
  HostTensor x(s.dtype, s.rows, h, stride), dy(s.dtype, s.rows, h, stride), gamma;
  x.FillNormal(rng, 0.3, 1.7);
  dy.FillNormal(rng, 0.0, 1.0);
  if (s.gamma) {
    gamma = HostTensor(s.param_dtype, 1, h, h);
    gamma.FillNormal(rng, 1.0, 0.5);
  }
  const std::vector<double> gamma_row = s.gamma ? gamma.Row(0) : std::vector<double>(h, 1.0);
  // Statistics: the reference's, rounded to fp32 when they are passed in.
  std::vector<float> mean(s.rows), rstd(s.rows);
  ParallelFor(s.rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const std::vector<double> row = x.Row(r);
      const RowResult stats =
          ReferenceForwardRow(s.op, row.data(), nullptr, nullptr, nullptr, h, 1e-5);
      mean[r] = static_cast<float>(stats.mean);
      rstd[r] = static_cast<float>(stats.rstd);
    }
  });
  // x, dy and dx `offset` elements into their buffers (poison before).
  const std::size_t offset_bytes = static_cast<std::size_t>(s.offset) * DTypeSize(s.dtype);
  auto at_offset = [&](const HostTensor& t) {
    DeviceBuffer buffer(t.bytes.size() + offset_bytes);
    std::vector<uint8_t> staged(buffer.bytes(), 0x5a);
    std::memcpy(staged.data() + offset_bytes, t.bytes.data(), t.bytes.size());
    buffer.Upload(staged.data(), staged.size());
    return buffer;
  };
  DeviceBuffer x_dev = at_offset(x), dy_dev = at_offset(dy);
  DeviceBuffer gamma_dev = s.gamma ? gamma.ToDevice() : DeviceBuffer();
  DeviceBuffer mean_dev(s.rows * sizeof(float)), rstd_dev(s.rows * sizeof(float));
  mean_dev.Upload(mean.data(), s.rows * sizeof(float));
  rstd_dev.Upload(rstd.data(), s.rows * sizeof(float));
  const std::size_t dx_offset_bytes =
      s.dx_offset >= 0 ? static_cast<std::size_t>(s.dx_offset) * DTypeSize(s.dtype) : offset_bytes;
  DeviceBuffer dx_dev(x.bytes.size() + dx_offset_bytes), dgamma_dev(h * sizeof(float)),
      dbeta_dev(h * sizeof(float));
  DeviceBuffer workspace(BackwardWorkspaceBytes(s.rows, h));

  BackwardArgs a;
  a.op = s.op;
  a.rows = s.rows;
  a.hidden = h;
  a.epsilon = 1e-5f;
  a.x_dtype = s.dtype;
  a.param_dtype = s.param_dtype;
  a.x = static_cast<const uint8_t*>(x_dev.get()) + offset_bytes;
  a.dy = static_cast<const uint8_t*>(dy_dev.get()) + offset_bytes;
  a.x_row_stride = a.dy_row_stride = a.dx_row_stride = stride;
  a.gamma = gamma_dev.get();
  a.mean =
      s.given_stats && s.op == NormOp::kLayerNorm ? static_cast<float*>(mean_dev.get()) : nullptr;
  a.rstd = s.given_stats ? static_cast<float*>(rstd_dev.get()) : nullptr;
  a.dx = static_cast<uint8_t*>(dx_dev.get()) + dx_offset_bytes;
  a.dgamma = s.dgamma ? static_cast<float*>(dgamma_dev.get()) : nullptr;
  a.dbeta = s.dbeta ? static_cast<float*>(dbeta_dev.get()) : nullptr;

  std::vector<uint8_t> first_run;
  for (uint8_t poison : {uint8_t{0x7f}, uint8_t{0x3c}}) {
    for (const DeviceBuffer* b : {&dx_dev, &dgamma_dev, &dbeta_dev, &workspace}) b->Poison(poison);
    const Status st = LaunchBackward(a, workspace.get(), workspace.bytes(), nullptr);
    EXPECT_TRUE(st.ok()) << st.message() << " [" << Describe(s) << "]";
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> run = dx_dev.Download();
    // Every dx byte outside the rows (before row 0, and each row's padding)
    // keeps the poison: a write past a row's end shows here.
    std::size_t stray = 0;
    for (std::size_t i = 0; i < run.size(); ++i) {
      const bool outside =
          i < dx_offset_bytes ||
          static_cast<int64_t>((i - dx_offset_bytes) / DTypeSize(s.dtype)) % stride >= h;
      stray += outside && run[i] != poison;
    }
    EXPECT_EQ(stray, 0u) << "dx bytes written outside the rows [" << Describe(s) << "]";
    run.erase(run.begin(), run.begin() + static_cast<std::ptrdiff_t>(dx_offset_bytes));
    for (const DeviceBuffer* b : {&dgamma_dev, &dbeta_dev}) {
      const std::vector<uint8_t> part = b->Download();
      run.insert(run.end(), part.begin(), part.end());
    }
    // dx padding and unrequested outputs keep the poison; compare only the rest.
    if (first_run.empty()) {
      first_run = run;
    } else {
      std::size_t differing = 0;
      const std::size_t dx_bytes = x.bytes.size();
      for (std::size_t i = 0; i < run.size(); ++i) {
        const bool is_written = i < dx_bytes
                                    ? static_cast<int64_t>(i / DTypeSize(s.dtype)) % stride < h
                                    : (i < dx_bytes + h * sizeof(float) ? s.dgamma : s.dbeta);
        differing += is_written && run[i] != first_run[i];
      }
      EXPECT_EQ(differing, 0u) << "backward not reproducible run to run [" << Describe(s) << "]";
    }
  }

  HostTensor dx(s.dtype, s.rows, h, stride);
  std::memcpy(dx.bytes.data(), first_run.data(), dx.bytes.size());
  const std::vector<uint8_t> dgamma_bytes = dgamma_dev.Download(),
                             dbeta_bytes = dbeta_dev.Download();
  std::vector<double> dgamma_ref(h, 0.0), dbeta_ref(h, 0.0), dgamma_mag(h, 0.0), dbeta_mag(h, 0.0);
  std::mutex mutex;
  std::atomic<int64_t> failures{0};
  std::vector<std::string> messages;
  double max_ratio = 0.0;
  auto fail = [&](const std::string& what) {
    ++failures;
    std::lock_guard<std::mutex> lock(mutex);
    if (messages.size() < 5) messages.push_back(what);
  };
  const bool layer_norm = s.op == NormOp::kLayerNorm;
  ParallelFor(s.rows, [&](int64_t begin, int64_t end) {
    std::vector<double> dg(h, 0.0), db(h, 0.0), dgm(h, 0.0), dbm(h, 0.0), xhat(h), g(h);
    double local_max = 0.0;
    for (int64_t r = begin; r < end; ++r) {
      const std::vector<double> xr = x.Row(r), dyr = dy.Row(r);
      double m = mean[r], rs = rstd[r];
      if (!s.given_stats) {
        const RowResult stats =
            ReferenceForwardRow(s.op, xr.data(), nullptr, nullptr, nullptr, h, 1e-5f);
        m = stats.mean;
        rs = stats.rstd;
      }
      if (!layer_norm) m = 0.0;
      double sum_g = 0, sum_gx = 0, abs_g = 0, abs_gx = 0;
      for (int64_t c = 0; c < h; ++c) {
        xhat[c] = (xr[c] - m) * rs;
        g[c] = dyr[c] * gamma_row[c];
        sum_g += g[c];
        sum_gx += g[c] * xhat[c];
        abs_g += std::fabs(g[c]);
        abs_gx += std::fabs(g[c] * xhat[c]);
        dg[c] += dyr[c] * xhat[c];
        db[c] += dyr[c];
        dgm[c] += std::fabs(dyr[c]) * (std::fabs(xhat[c]) + 1.0);
        dbm[c] += std::fabs(dyr[c]);
      }
      const double mg = layer_norm ? sum_g / h : 0.0, mgx = sum_gx / h;
      for (int64_t c = 0; c < h; ++c) {
        const double ref = rs * ((g[c] - mg) - xhat[c] * mgx);
        const double tol =
            2e-5 * rs *
                (std::fabs(g[c]) + abs_g / h + std::fabs(xhat[c]) * (std::fabs(mgx) + abs_gx / h)) +
            OutputUlp(s.dtype, ref);
        const double err = std::fabs(dx.At(r, c) - ref);
        local_max = std::max(local_max, err / tol);
        if (!(err <= tol)) {
          fail("dx row " + std::to_string(r) + " col " + std::to_string(c) + ": " +
               std::to_string(dx.At(r, c)) + " ref " + std::to_string(ref));
        }
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    max_ratio = std::max(max_ratio, local_max);
    for (int64_t c = 0; c < h; ++c) {
      dgamma_ref[c] += dg[c];
      dbeta_ref[c] += db[c];
      dgamma_mag[c] += dgm[c];
      dbeta_mag[c] += dbm[c];
    }
  });
  for (int64_t c = 0; c < h; ++c) {
    if (s.dgamma) {
      const double got = LoadAsFloat(dgamma_bytes.data(), DType::kF32, c);
      const double tol = 2e-5 * dgamma_mag[c] + 1e-30;
      max_ratio = std::max(max_ratio, std::fabs(got - dgamma_ref[c]) / tol);
      if (!(std::fabs(got - dgamma_ref[c]) <= tol)) {
        fail("dgamma col " + std::to_string(c) + ": " + std::to_string(got) + " ref " +
             std::to_string(dgamma_ref[c]));
      }
    }
    if (s.dbeta) {
      const double got = LoadAsFloat(dbeta_bytes.data(), DType::kF32, c);
      const double tol = 2e-5 * dbeta_mag[c] + 1e-30;
      max_ratio = std::max(max_ratio, std::fabs(got - dbeta_ref[c]) / tol);
      if (!(std::fabs(got - dbeta_ref[c]) <= tol)) {
        fail("dbeta col " + std::to_string(c) + ": " + std::to_string(got) + " ref " +
             std::to_string(dbeta_ref[c]));
      }
    }
  }
  if (failures > 0) {
    std::ostringstream o;
    o << Describe(s) << ": " << failures << " mismatches";
    for (const std::string& m : messages) o << "\n  " << m;
    ADD_FAILURE() << o.str();
  }
  std::printf("[ backward ] %-80s max err/tol %.3f\n", Describe(s).c_str(), max_ratio);
  return max_ratio;
}

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

// Sets whether backward launches may take BackwardRealignKernel for the
// scope, and restores the setting after (process-wide).
class ScopedBackwardRealign {
 public:
  explicit ScopedBackwardRealign(bool enabled) : before_(detail::BackwardRealignEnabled()) {
    detail::SetBackwardRealignEnabled(enabled);
  }
  ~ScopedBackwardRealign() { detail::SetBackwardRealignEnabled(before_); }
  ScopedBackwardRealign(const ScopedBackwardRealign&) = delete;
  ScopedBackwardRealign& operator=(const ScopedBackwardRealign&) = delete;

 private:
  bool before_;
};

// BackwardRealignKernel (launch_plan.h, PlanBackwardRealign): rows of H not a
// multiple of the vector width at every kind of offset from a 16-byte
// boundary: the buffers' first element 0, 1 or W - 1 elements past one,
// rows of H (bf16 2049: row r at r elements past, eight offset classes) or
// H + 3 elements; one row, a few (fewer rows than classes) and many; saved
// and recomputed statistics, parameters in the x dtype and in fp32; dgamma
// and dbeta, dx alone without gamma, dgamma alone, dbeta alone. H covers
// one and two words a thread and several rows a block for every dtype
// (fp32 301: 2 rows a block; 1023: one word a thread). Each case must have
// taken the kernel (its launch count), match the double reference, repeat
// bit for bit and leave every dx byte outside its rows unwritten. Then dx
// one element off x and dy: the rows do not share their offsets, so the
// strided kernel serves them (no realigned launch), as correctly.
TEST(BackwardRealign, EveryRowOffsetMatchesTheReference) {
  NORMSVC_REQUIRE_GPU();
  const ScopedBackwardRealign realign(true);
  std::mt19937_64 rng = SeededRng("backward realign");
  int variant = 0;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const int64_t width = 16 / static_cast<int64_t>(DTypeSize(dtype));
    for (int64_t hidden :
         {int64_t{300}, int64_t{301}, int64_t{1023}, int64_t{2049}, int64_t{4095}, int64_t{8185}}) {
      if (detail::PlanBackwardRealign(hidden, dtype).slots == 0) continue;
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        for (int64_t offset : {int64_t{0}, int64_t{1}, width - 1}) {
          for (int64_t pad : {int64_t{0}, int64_t{3}}) {
            for (int64_t rows : {int64_t{1}, int64_t{5}, int64_t{700}}) {
              BackwardSpec s;
              s.op = op;
              s.dtype = dtype;
              s.param_dtype = (rows + offset) % 2 == 0 ? dtype : DType::kF32;
              // At most 2^20 elements: 128 rows of 8185 (eight offset classes
              // of 16 rows), 511 of 2049.
              s.rows = std::min(rows, (int64_t{1} << 20) / hidden);
              s.hidden = hidden;
              s.pad = pad;
              s.offset = offset;
              s.given_stats = (pad + rows) % 2 == 1;
              switch (variant++ % 4) {
                case 1:  // dx alone, no gamma
                  s.gamma = s.dgamma = s.dbeta = false;
                  break;
                case 2:
                  s.dgamma = false;
                  break;
                case 3:
                  s.dbeta = false;
                  break;
                default:
                  break;
              }
              const int64_t before = detail::RealignBackwardLaunches();
              RunAndCheck(s, rng);
              // Two launches a case (the run-to-run check).
              EXPECT_EQ(detail::RealignBackwardLaunches() - before, 2) << Describe(s);
            }
          }
        }
      }
    }
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      BackwardSpec s;
      s.op = op;
      s.dtype = s.param_dtype = dtype;
      s.rows = 300;
      s.hidden = 2049;
      s.offset = 0;
      s.dx_offset = 1;
      const int64_t before = detail::RealignBackwardLaunches();
      RunAndCheck(s, rng);
      EXPECT_EQ(detail::RealignBackwardLaunches(), before) << Describe(s);
    }
  }
}

// The workspace BackwardWorkspaceBytes asks for holds the realigned
// backward's partials (2 x units x H floats) at every offset period the
// launcher can meet, for every dtype. Host arithmetic only: runs everywhere.
TEST(BackwardRealign, WorkspaceHoldsEveryRealignedPartition) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const int width = 16 / static_cast<int>(DTypeSize(dtype));
    for (int64_t hidden : {257, 300, 301, 1023, 2049, 4093, 4095, 8185}) {
      const detail::KernelPlan plan = detail::PlanBackwardRealign(hidden, dtype);
      if (plan.slots == 0) continue;
      for (int64_t rows : {1, 2, 3, 7, 8, 9, 100, 1000, 8189, 100000}) {
        for (int step = 0; step < width; ++step) {
          const int period = detail::RealignPeriod(step, width);
          const detail::RealignedBackwardUnits units =
              detail::PlanRealignedBackwardUnits(rows, hidden, plan, period);
          EXPECT_GE(BackwardWorkspaceBytes(rows, hidden),
                    static_cast<std::size_t>(2 * units.units * hidden) * sizeof(float))
              << DTypeName(dtype) << " H=" << hidden << " rows=" << rows << " period=" << period;
        }
      }
    }
  }
}

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
