// One backward test case on the GPU (gpu_backward_case.h).
#include "gpu_backward_case.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_support.h"
#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/gpu.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::kernels::testing {

std::string Describe(const BackwardSpec& s) {
  std::ostringstream o;
  o << NormOpName(s.op) << " " << DTypeName(s.dtype) << " params=" << DTypeName(s.param_dtype)
    << " rows=" << s.rows << " H=" << s.hidden << " pad=" << s.pad << " offset=" << s.offset
    << (s.dx_offset >= 0 ? " dx_offset=" + std::to_string(s.dx_offset) : "")
    << (s.gamma ? " gamma" : "") << (s.given_stats ? " given-stats" : " recomputed-stats")
    << (s.dgamma ? " dgamma" : "") << (s.dbeta ? " dbeta" : "")
    << (s.label.empty() ? "" : " rows: " + s.label);
  return o.str();
}

double RunAndCheck(const BackwardSpec& spec, std::mt19937_64& rng) {
  BackwardSpec s = spec;
  if (s.op == NormOp::kRmsNorm) s.dbeta = false;
  const int64_t h = s.hidden, stride = h + s.pad;
  HostTensor x(s.dtype, s.rows, h, stride), dy(s.dtype, s.rows, h, stride), gamma;
  x.FillNormal(rng, 0.3, 1.7);
  dy.FillNormal(rng, 0.0, 1.0);
  if (s.rewrite_x) s.rewrite_x(x, rng);
  // NaN between the rows and around the tensors (below): a kernel that lets
  // a byte outside the rows reach a result fails the comparison.
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = h; c < stride; ++c) {
      x.Set(r, c, std::nan(""));
      dy.Set(r, c, std::nan(""));
    }
  }
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
    std::vector<uint8_t> staged(buffer.bytes(), 0xff);  // NaN in every dtype
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
  // Each output with a guard after its end, which must keep the poison.
  constexpr std::size_t kGuardBytes = 32;
  DeviceBuffer dx_dev(dx_offset_bytes + x.bytes.size() + kGuardBytes),
      dgamma_dev(h * sizeof(float) + kGuardBytes), dbeta_dev(h * sizeof(float) + kGuardBytes);
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

  // The checks below read the last run's results, whose poison (0x3c) is
  // finite in every dtype: an element left unwritten in a row whose dx must
  // be NaN does not pass for one (0x7f is NaN in fp16).
  std::vector<uint8_t> first_run, last_run;
  for (uint8_t poison : {uint8_t{0x7f}, uint8_t{0x3c}}) {
    for (const DeviceBuffer* b : {&dx_dev, &dgamma_dev, &dbeta_dev, &workspace}) b->Poison(poison);
    const Status st = LaunchBackward(a, workspace.get(), workspace.bytes(), nullptr);
    EXPECT_TRUE(st.ok()) << st.message() << " [" << Describe(s) << "]";
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> run = dx_dev.Download();
    // Every dx byte outside the rows (before row 0, each row's padding, the
    // guard after the last row) keeps the poison: a write past a row's end
    // shows here.
    // (In parallel: at 1,000 rows of 262,144 a byte at a time takes seconds.)
    std::atomic<std::size_t> stray{0};
    ParallelFor(static_cast<int64_t>(run.size()), [&](int64_t begin, int64_t end) {
      std::size_t local = 0;
      for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) {
        const bool outside =
            i < dx_offset_bytes || i >= dx_offset_bytes + x.bytes.size() ||
            static_cast<int64_t>((i - dx_offset_bytes) / DTypeSize(s.dtype)) % stride >= h;
        local += outside && run[i] != poison;
      }
      stray += local;
    });
    EXPECT_EQ(stray.load(), 0u) << "dx bytes written outside the rows [" << Describe(s) << "]";
    run.erase(run.begin(), run.begin() + static_cast<std::ptrdiff_t>(dx_offset_bytes));
    run.resize(x.bytes.size());
    for (const DeviceBuffer* b : {&dgamma_dev, &dbeta_dev}) {
      const std::vector<uint8_t> part = b->Download();
      const std::size_t sums = h * sizeof(float);
      std::size_t past_end = 0;
      for (std::size_t i = sums; i < part.size(); ++i) past_end += part[i] != poison;
      EXPECT_EQ(past_end, 0u) << (b == &dgamma_dev ? "dgamma" : "dbeta")
                              << " written past its H floats [" << Describe(s) << "]";
      run.insert(run.end(), part.begin(), part.begin() + static_cast<std::ptrdiff_t>(sums));
    }
    // dx padding and unrequested outputs keep the poison; compare only the rest.
    last_run = run;
    if (first_run.empty()) {
      first_run = run;
    } else {
      std::atomic<std::size_t> differing{0};
      const std::size_t dx_bytes = x.bytes.size();
      ParallelFor(static_cast<int64_t>(run.size()), [&](int64_t begin, int64_t end) {
        std::size_t local = 0;
        for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) {
          const bool is_written = i < dx_bytes
                                      ? static_cast<int64_t>(i / DTypeSize(s.dtype)) % stride < h
                                      : (i < dx_bytes + h * sizeof(float) ? s.dgamma : s.dbeta);
          local += is_written && run[i] != first_run[i];
        }
        differing += local;
      });
      EXPECT_EQ(differing.load(), 0u)
          << "backward not reproducible run to run [" << Describe(s) << "]";
    }
  }

  HostTensor dx(s.dtype, s.rows, h, stride);
  std::memcpy(dx.bytes.data(), last_run.data(), dx.bytes.size());
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
        if (!std::isfinite(ref)) {  // NaN or Inf in the row: dx must not be finite either
          if (std::isfinite(dx.At(r, c))) {
            fail("dx row " + std::to_string(r) + " col " + std::to_string(c) + ": " +
                 std::to_string(dx.At(r, c)) + " where the reference is " + std::to_string(ref));
          }
          continue;
        }
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
  // Each dgamma / dbeta column: non-finite where its reference is (a NaN or
  // Inf row's term), within the metric of the reference everywhere else.
  const auto check_column = [&](const char* what, const std::vector<uint8_t>& bytes, int64_t c,
                                double ref, double magnitude) {
    const double got = LoadAsFloat(bytes.data(), DType::kF32, c);
    if (!std::isfinite(ref)) {
      if (std::isfinite(got)) {
        fail(std::string(what) + " col " + std::to_string(c) + ": " + std::to_string(got) +
             " where the reference is " + std::to_string(ref));
      }
      return;
    }
    const double tol = 2e-5 * magnitude + 1e-30;
    max_ratio = std::max(max_ratio, std::fabs(got - ref) / tol);
    if (!(std::fabs(got - ref) <= tol)) {
      fail(std::string(what) + " col " + std::to_string(c) + ": " + std::to_string(got) + " ref " +
           std::to_string(ref));
    }
  };
  for (int64_t c = 0; c < h; ++c) {
    if (s.dgamma) check_column("dgamma", dgamma_bytes, c, dgamma_ref[c], dgamma_mag[c]);
    if (s.dbeta) check_column("dbeta", dbeta_bytes, c, dbeta_ref[c], dbeta_mag[c]);
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

}  // namespace normsvc::kernels::testing
