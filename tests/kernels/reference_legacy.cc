// The CPU reference exactly as it was before its rewrite for speed: a
// verbatim copy of kernels/src/reference.cc at commit 534f575, in its own
// namespace (calls to ReferenceForwardRow qualified: argument-dependent
// lookup also finds the library's), kept as the oracle the rewrite must
// match bit for bit. Test-only.
#include "reference_legacy.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "normsvc/kernels/float16.h"
#include "reference_chunks.h"

namespace normsvc::kernels::legacy {
namespace {

// Below this many elements a call runs on the calling thread only.
constexpr int64_t kElementsPerThread = 1 << 16;

int ThreadCount(const ReferenceOptions& options, int64_t elements) {
  int limit = options.max_threads > 0 ? options.max_threads
                                      : static_cast<int>(std::thread::hardware_concurrency());
  limit = std::max(limit, 1);
  const int64_t wanted = std::max<int64_t>(1, elements / kElementsPerThread);
  return static_cast<int>(std::min<int64_t>(limit, wanted));
}

// Runs body(begin, end) over [0, rows) split into contiguous chunks.
void ParallelRows(int64_t rows, int threads, const std::function<void(int64_t, int64_t)>& body) {
  if (threads <= 1 || rows <= 1) {
    body(0, rows);
    return;
  }
  threads = static_cast<int>(std::min<int64_t>(threads, rows));
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const int64_t chunk = (rows + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    const int64_t begin = t * chunk;
    const int64_t end = std::min(rows, begin + chunk);
    if (begin >= end) break;
    workers.emplace_back(body, begin, end);
  }
  body(0, std::min(rows, chunk));
  for (std::thread& worker : workers) worker.join();
}

std::vector<double> DecodeParam(const void* data, DType dtype, int64_t hidden) {
  std::vector<double> values;
  if (data == nullptr) return values;
  values.resize(hidden);
  for (int64_t i = 0; i < hidden; ++i) values[i] = LoadAsFloat(data, dtype, i);
  return values;
}

const char* ElementPtr(const void* base, DType dtype, int64_t row, int64_t stride) {
  return static_cast<const char*>(base) + row * stride * static_cast<int64_t>(DTypeSize(dtype));
}
char* ElementPtr(void* base, DType dtype, int64_t row, int64_t stride) {
  return static_cast<char*>(base) + row * stride * static_cast<int64_t>(DTypeSize(dtype));
}

void ForwardRows(const ForwardSegment& s, const std::vector<double>& gamma,
                 const std::vector<double>& beta, int64_t begin, int64_t end) {
  const int64_t h = s.hidden;
  std::vector<double> x(h), residual;
  if (s.residual != nullptr) residual.resize(h);
  for (int64_t r = begin; r < end; ++r) {
    const char* x_row = ElementPtr(s.x, s.x_dtype, r, s.x_row_stride);
    for (int64_t i = 0; i < h; ++i) x[i] = LoadAsFloat(x_row, s.x_dtype, i);
    if (s.residual != nullptr) {
      const char* res_row = ElementPtr(s.residual, s.x_dtype, r, s.residual_row_stride);
      for (int64_t i = 0; i < h; ++i) residual[i] = LoadAsFloat(res_row, s.x_dtype, i);
    }
    RowResult row = legacy::ReferenceForwardRow(
        s.op, x.data(), residual.empty() ? nullptr : residual.data(),
        gamma.empty() ? nullptr : gamma.data(), beta.empty() ? nullptr : beta.data(), h, s.epsilon);
    // ReferenceForwardRow normalizes the exact sum; recompute from the sum
    // rounded to x_dtype, which is what the contract normalizes.
    if (s.residual != nullptr) {
      std::vector<double> rounded(h);
      char* sum_row = s.residual_out != nullptr
                          ? ElementPtr(s.residual_out, s.x_dtype, r, s.residual_out_row_stride)
                          : nullptr;
      for (int64_t i = 0; i < h; ++i) {
        uint32_t scratch = 0;
        StoreFromDouble(&scratch, s.x_dtype, 0, row.sum[i]);
        rounded[i] = LoadAsFloat(&scratch, s.x_dtype, 0);
        if (sum_row != nullptr) StoreFromDouble(sum_row, s.x_dtype, i, row.sum[i]);
      }
      row = legacy::ReferenceForwardRow(s.op, rounded.data(), nullptr,
                                        gamma.empty() ? nullptr : gamma.data(),
                                        beta.empty() ? nullptr : beta.data(), h, s.epsilon);
    }
    char* out_row = ElementPtr(s.out, s.out_dtype, r, s.out_row_stride);
    for (int64_t i = 0; i < h; ++i) StoreFromDouble(out_row, s.out_dtype, i, row.y[i]);
    if (s.mean != nullptr) s.mean[r] = static_cast<float>(row.mean);
    if (s.rstd != nullptr) s.rstd[r] = static_cast<float>(row.rstd);
  }
}

}  // namespace

RowResult ReferenceForwardRow(NormOp op, const double* x, const double* residual,
                              const double* gamma, const double* beta, int64_t hidden,
                              double epsilon) {
  RowResult result;
  result.sum.resize(hidden);
  for (int64_t i = 0; i < hidden; ++i) result.sum[i] = x[i] + (residual ? residual[i] : 0.0);
  const std::vector<double>& v = result.sum;
  double mean = 0.0;
  if (op == NormOp::kLayerNorm) {
    for (int64_t i = 0; i < hidden; ++i) mean += v[i];
    mean /= static_cast<double>(hidden);
  }
  // Two passes over the row: the centred second moment does not cancel.
  double second_moment = 0.0;
  for (int64_t i = 0; i < hidden; ++i) {
    const double centred = v[i] - mean;
    second_moment += centred * centred;
  }
  second_moment /= static_cast<double>(hidden);
  const double rstd = 1.0 / std::sqrt(second_moment + epsilon);
  result.mean = mean;
  result.rstd = rstd;
  result.y.resize(hidden);
  for (int64_t i = 0; i < hidden; ++i) {
    double y = (v[i] - mean) * rstd;
    if (gamma) y *= gamma[i];
    if (beta) y += beta[i];
    result.y[i] = y;
  }
  return result;
}

Status ReferenceForward(const ForwardSegment* segments, int count,
                        const ReferenceOptions& options) {
  if (count < 0 || (count > 0 && segments == nullptr)) {
    return Status(Code::kInvalidArgument, "segments must not be null");
  }
  for (int i = 0; i < count; ++i) {
    if (Status st = ValidateForwardSegment(segments[i]); !st.ok()) {
      return Status(st.code(), "segment " + std::to_string(i) + ": " + st.message());
    }
  }
  for (int i = 0; i < count; ++i) {
    const ForwardSegment& s = segments[i];
    if (s.rows == 0) continue;
    const std::vector<double> gamma = DecodeParam(s.gamma, s.param_dtype, s.hidden);
    const std::vector<double> beta = DecodeParam(s.beta, s.param_dtype, s.hidden);
    ParallelRows(s.rows, ThreadCount(options, s.rows * s.hidden),
                 [&](int64_t begin, int64_t end) { ForwardRows(s, gamma, beta, begin, end); });
  }
  return Status::Ok();
}

Status ReferenceBackward(const BackwardArgs& a, const ReferenceOptions& /*options*/) {
  if (Status st = ValidateBackwardArgs(a); !st.ok()) return st;
  const int64_t h = a.hidden;
  const std::vector<double> gamma = DecodeParam(a.gamma, a.param_dtype, h);
  const bool layer_norm = a.op == NormOp::kLayerNorm;
  // Per-chunk column partials, summed in chunk order; chunks of the
  // production split (reference_chunks.h), one after another.
  const int64_t chunk = detail::BackwardChunkRows(a.rows, h);
  const int64_t chunks = (a.rows + chunk - 1) / chunk;
  std::vector<std::vector<double>> dgamma_parts(chunks), dbeta_parts(chunks);
  auto body = [&](int64_t begin, int64_t end) {
    const int64_t part = begin / chunk;
    std::vector<double>& dgamma = dgamma_parts[part];
    std::vector<double>& dbeta = dbeta_parts[part];
    dgamma.assign(h, 0.0);
    dbeta.assign(h, 0.0);
    std::vector<double> x(h), dy(h), xhat(h), g(h);
    for (int64_t r = begin; r < end; ++r) {
      const char* x_row = ElementPtr(a.x, a.x_dtype, r, a.x_row_stride);
      const char* dy_row = ElementPtr(a.dy, a.x_dtype, r, a.dy_row_stride);
      for (int64_t i = 0; i < h; ++i) {
        x[i] = LoadAsFloat(x_row, a.x_dtype, i);
        dy[i] = LoadAsFloat(dy_row, a.x_dtype, i);
      }
      double mean = 0.0, rstd = 0.0;
      if (a.rstd != nullptr) {
        rstd = a.rstd[r];
        mean = layer_norm ? a.mean[r] : 0.0;
      } else {
        const RowResult stats =
            legacy::ReferenceForwardRow(a.op, x.data(), nullptr, nullptr, nullptr, h, a.epsilon);
        mean = stats.mean;
        rstd = stats.rstd;
      }
      double mean_g = 0.0, mean_g_xhat = 0.0;
      for (int64_t i = 0; i < h; ++i) {
        xhat[i] = (x[i] - mean) * rstd;
        g[i] = dy[i] * (gamma.empty() ? 1.0 : gamma[i]);
        mean_g += g[i];
        mean_g_xhat += g[i] * xhat[i];
        dgamma[i] += dy[i] * xhat[i];
        dbeta[i] += dy[i];
      }
      mean_g /= static_cast<double>(h);
      mean_g_xhat /= static_cast<double>(h);
      char* dx_row = ElementPtr(a.dx, a.x_dtype, r, a.dx_row_stride);
      for (int64_t i = 0; i < h; ++i) {
        const double centred_g = layer_norm ? g[i] - mean_g : g[i];
        StoreFromDouble(dx_row, a.x_dtype, i, rstd * (centred_g - xhat[i] * mean_g_xhat));
      }
    }
  };
  for (int64_t b = 0; b < a.rows; b += chunk) body(b, std::min(a.rows, b + chunk));
  for (int64_t i = 0; i < h; ++i) {
    double dgamma = 0.0, dbeta = 0.0;
    for (int64_t p = 0; p < chunks; ++p) {
      dgamma += dgamma_parts[p][i];
      dbeta += dbeta_parts[p][i];
    }
    if (a.dgamma != nullptr) a.dgamma[i] = static_cast<float>(dgamma);
    if (a.dbeta != nullptr) a.dbeta[i] = static_cast<float>(dbeta);
  }
  return Status::Ok();
}

}  // namespace normsvc::kernels::legacy
