#include "normsvc/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <type_traits>
#include <vector>

#include "normsvc/kernels/float16.h"

// Speed without changing a bit: every element goes through the same double
// operations, and every sum adds the same terms in the same order, as the
// straightforward per-element version (tests/kernels/reference_legacy.cc,
// checked byte for byte by reference_equivalence_test). What is gone is the
// overhead around them: rows are decoded and encoded a whole row at a time
// with the dtype switch outside the loop and the conversions inlined, scratch
// rows are allocated once per thread instead of several times per row, the
// forward no longer normalizes the unrounded residual sum only to discard it,
// and loops without a reduction vectorize.

namespace normsvc::kernels {
namespace {

// Below this many elements a call runs on the calling thread only. The
// backward's dgamma/dbeta chunks follow the thread count, so this constant is
// part of its bitwise result.
constexpr int64_t kElementsPerThread = 1 << 16;

int HardwareThreads() {
  // hardware_concurrency() reads /sys on every call (microseconds): once.
  static const int threads = static_cast<int>(std::thread::hardware_concurrency());
  return threads;
}

int ThreadCount(const ReferenceOptions& options, int64_t elements) {
  int limit = options.max_threads > 0 ? options.max_threads : HardwareThreads();
  limit = std::max(limit, 1);
  const int64_t wanted = std::max<int64_t>(1, elements / kElementsPerThread);
  return static_cast<int>(std::min<int64_t>(limit, wanted));
}

// Runs body(begin, end) over [0, rows) split into contiguous chunks of
// ceil(rows / threads) rows, the first on the calling thread.
template <typename Body>
void ParallelRows(int64_t rows, int threads, const Body& body) {
  if (threads <= 1 || rows <= 1) {
    body(int64_t{0}, rows);
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
    workers.emplace_back([&body, begin, end] { body(begin, end); });
  }
  body(int64_t{0}, std::min(rows, chunk));
  for (std::thread& worker : workers) worker.join();
}

template <DType D>
using DTypeConstant = std::integral_constant<DType, D>;

// Calls f(DTypeConstant<dtype>{}): one switch per row, not per element.
template <typename F>
void WithDType(DType dtype, const F& f) {
  switch (dtype) {
    case DType::kF32:
      return f(DTypeConstant<DType::kF32>{});
    case DType::kF16:
      return f(DTypeConstant<DType::kF16>{});
    case DType::kBF16:
      return f(DTypeConstant<DType::kBF16>{});
  }
}

// Element i as float, as LoadAsFloat reads it.
template <DType D>
inline float LoadElement(const void* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    return static_cast<const float*>(row)[i];
  } else if constexpr (D == DType::kF16) {
    return HalfBitsToFloat(static_cast<const uint16_t*>(row)[i]);
  } else {
    return Bf16BitsToFloat(static_cast<const uint16_t*>(row)[i]);
  }
}

// Writes `value` rounded to D at i, as StoreFromFloat does; returns the
// rounded value.
template <DType D>
inline float StoreElement(void* row, int64_t i, float value) {
  if constexpr (D == DType::kF32) {
    static_cast<float*>(row)[i] = value;
    return value;
  } else if constexpr (D == DType::kF16) {
    const uint16_t bits = FloatToHalfBits(value);
    static_cast<uint16_t*>(row)[i] = bits;
    return HalfBitsToFloat(bits);
  } else {
    const uint16_t bits = FloatToBf16Bits(value);
    static_cast<uint16_t*>(row)[i] = bits;
    return Bf16BitsToFloat(bits);
  }
}

// values[i] = element i of a `dtype` row, widened exactly.
void DecodeRow(const void* row, DType dtype, int64_t n, double* values) {
  WithDType(dtype, [&](auto d) {
    for (int64_t i = 0; i < n; ++i) values[i] = LoadElement<d()>(row, i);
  });
}

// Element i of a `dtype` row = values[i] rounded as StoreFromDouble rounds:
// to float, then to the 16-bit format.
void EncodeRow(const double* values, int64_t n, DType dtype, void* row) {
  WithDType(dtype, [&](auto d) {
    for (int64_t i = 0; i < n; ++i) StoreElement<d()>(row, i, static_cast<float>(values[i]));
  });
}

// v[i] = (v[i] + residual[i]) rounded to `dtype` (the sum the contract
// normalizes), also written to residual_out when that is not null.
void AddResidualRounded(double* v, const double* residual, int64_t n, DType dtype,
                        void* residual_out) {
  WithDType(dtype, [&](auto d) {
    uint32_t scratch = 0;
    void* sink = residual_out != nullptr ? residual_out : &scratch;
    const int64_t step = residual_out != nullptr ? 1 : 0;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = StoreElement<d()>(sink, i * step, static_cast<float>(v[i] + residual[i]));
    }
  });
}

struct RowStatistics {
  double mean = 0.0;
  double rstd = 0.0;
};

// Mean (LayerNorm; 0 for RMSNorm) and rstd of v, summed left to right.
RowStatistics Statistics(NormOp op, const double* v, int64_t hidden, double epsilon) {
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
  return {mean, 1.0 / std::sqrt(second_moment + epsilon)};
}

// y = (v - mean) * rstd, times gamma, plus beta (each optional). y may be v.
void Normalize(const double* v, RowStatistics stats, const double* gamma, const double* beta,
               int64_t hidden, double* y) {
  for (int64_t i = 0; i < hidden; ++i) y[i] = (v[i] - stats.mean) * stats.rstd;
  if (gamma != nullptr) {
    for (int64_t i = 0; i < hidden; ++i) y[i] *= gamma[i];
  }
  if (beta != nullptr) {
    for (int64_t i = 0; i < hidden; ++i) y[i] += beta[i];
  }
}

std::vector<double> DecodeParam(const void* data, DType dtype, int64_t hidden) {
  std::vector<double> values;
  if (data == nullptr) return values;
  values.resize(hidden);
  DecodeRow(data, dtype, hidden, values.data());
  return values;
}

const double* DataOrNull(const std::vector<double>& values) {
  return values.empty() ? nullptr : values.data();
}

const char* ElementPtr(const void* base, DType dtype, int64_t row, int64_t stride) {
  return static_cast<const char*>(base) + row * stride * static_cast<int64_t>(DTypeSize(dtype));
}
char* ElementPtr(void* base, DType dtype, int64_t row, int64_t stride) {
  return static_cast<char*>(base) + row * stride * static_cast<int64_t>(DTypeSize(dtype));
}

void ForwardRows(const ForwardSegment& s, const double* gamma, const double* beta, int64_t begin,
                 int64_t end) {
  const int64_t h = s.hidden;
  std::vector<double> scratch(s.residual != nullptr ? 2 * h : h);
  double* v = scratch.data();
  double* residual = v + h;
  for (int64_t r = begin; r < end; ++r) {
    DecodeRow(ElementPtr(s.x, s.x_dtype, r, s.x_row_stride), s.x_dtype, h, v);
    if (s.residual != nullptr) {
      DecodeRow(ElementPtr(s.residual, s.x_dtype, r, s.residual_row_stride), s.x_dtype, h,
                residual);
      void* sum_row = s.residual_out != nullptr
                          ? ElementPtr(s.residual_out, s.x_dtype, r, s.residual_out_row_stride)
                          : nullptr;
      AddResidualRounded(v, residual, h, s.x_dtype, sum_row);
    }
    // ReferenceForwardRow normalizes x + 0.0 (no residual there): -0 becomes
    // +0, which the sign of a zero output shows.
    for (int64_t i = 0; i < h; ++i) v[i] += 0.0;
    const RowStatistics stats = Statistics(s.op, v, h, s.epsilon);
    Normalize(v, stats, gamma, beta, h, v);
    EncodeRow(v, h, s.out_dtype, ElementPtr(s.out, s.out_dtype, r, s.out_row_stride));
    if (s.mean != nullptr) s.mean[r] = static_cast<float>(stats.mean);
    if (s.rstd != nullptr) s.rstd[r] = static_cast<float>(stats.rstd);
  }
}

// One chunk of backward rows: dx, and this chunk's dgamma/dbeta partials
// (rows added in order) when `dgamma`/`dbeta` are not null.
void BackwardRows(const BackwardArgs& a, const double* gamma, int64_t begin, int64_t end,
                  double* dgamma, double* dbeta) {
  const int64_t h = a.hidden;
  const bool layer_norm = a.op == NormOp::kLayerNorm;
  std::vector<double> scratch(4 * h);
  double* x = scratch.data();
  double* dy = x + h;
  double* xhat = dy + h;
  double* g = xhat + h;
  for (int64_t r = begin; r < end; ++r) {
    DecodeRow(ElementPtr(a.x, a.x_dtype, r, a.x_row_stride), a.x_dtype, h, x);
    DecodeRow(ElementPtr(a.dy, a.x_dtype, r, a.dy_row_stride), a.x_dtype, h, dy);
    RowStatistics stats;
    if (a.rstd != nullptr) {
      stats.rstd = a.rstd[r];
      stats.mean = layer_norm ? a.mean[r] : 0.0;
    } else {
      for (int64_t i = 0; i < h; ++i) xhat[i] = x[i] + 0.0;  // as ReferenceForwardRow sums
      stats = Statistics(a.op, xhat, h, a.epsilon);
    }
    for (int64_t i = 0; i < h; ++i) xhat[i] = (x[i] - stats.mean) * stats.rstd;
    if (gamma != nullptr) {
      for (int64_t i = 0; i < h; ++i) g[i] = dy[i] * gamma[i];
    } else {
      // dy * 1.0 is dy exactly (dy was widened from a narrower float, so it
      // is no signalling NaN).
      std::copy(dy, dy + h, g);
    }
    double mean_g = 0.0, mean_g_xhat = 0.0;
    for (int64_t i = 0; i < h; ++i) {
      mean_g += g[i];
      mean_g_xhat += g[i] * xhat[i];
    }
    if (dgamma != nullptr) {
      for (int64_t i = 0; i < h; ++i) dgamma[i] += dy[i] * xhat[i];
    }
    if (dbeta != nullptr) {
      for (int64_t i = 0; i < h; ++i) dbeta[i] += dy[i];
    }
    mean_g /= static_cast<double>(h);
    mean_g_xhat /= static_cast<double>(h);
    // dx overwrites g.
    if (layer_norm) {
      for (int64_t i = 0; i < h; ++i) g[i] = stats.rstd * ((g[i] - mean_g) - xhat[i] * mean_g_xhat);
    } else {
      for (int64_t i = 0; i < h; ++i) g[i] = stats.rstd * (g[i] - xhat[i] * mean_g_xhat);
    }
    EncodeRow(g, h, a.x_dtype, ElementPtr(a.dx, a.x_dtype, r, a.dx_row_stride));
  }
}

}  // namespace

RowResult ReferenceForwardRow(NormOp op, const double* x, const double* residual,
                              const double* gamma, const double* beta, int64_t hidden,
                              double epsilon) {
  RowResult result;
  result.sum.resize(hidden);
  for (int64_t i = 0; i < hidden; ++i) result.sum[i] = x[i] + (residual ? residual[i] : 0.0);
  const RowStatistics stats = Statistics(op, result.sum.data(), hidden, epsilon);
  result.mean = stats.mean;
  result.rstd = stats.rstd;
  result.y.resize(hidden);
  Normalize(result.sum.data(), stats, gamma, beta, hidden, result.y.data());
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
    ParallelRows(s.rows, ThreadCount(options, s.rows * s.hidden), [&](int64_t begin, int64_t end) {
      ForwardRows(s, DataOrNull(gamma), DataOrNull(beta), begin, end);
    });
  }
  return Status::Ok();
}

Status ReferenceBackward(const BackwardArgs& a, const ReferenceOptions& options) {
  if (Status st = ValidateBackwardArgs(a); !st.ok()) return st;
  const int64_t h = a.hidden;
  const std::vector<double> gamma = DecodeParam(a.gamma, a.param_dtype, h);
  const int threads = ThreadCount(options, a.rows * h);
  // Per-chunk column partials, summed in chunk order: deterministic.
  const int64_t chunk = a.rows == 0 ? 1 : (a.rows + threads - 1) / threads;
  const int64_t chunks = a.rows == 0 ? 0 : (a.rows + chunk - 1) / chunk;
  std::vector<double> dgamma_parts(a.dgamma != nullptr ? chunks * h : 0, 0.0);
  std::vector<double> dbeta_parts(a.dbeta != nullptr ? chunks * h : 0, 0.0);
  ParallelRows(a.rows, threads, [&](int64_t begin, int64_t end) {
    // ParallelRows splits with the same chunk size computed above.
    for (int64_t b = begin; b < end; b += chunk) {
      const int64_t part = b / chunk;
      BackwardRows(a, DataOrNull(gamma), b, std::min(end, b + chunk),
                   a.dgamma != nullptr ? dgamma_parts.data() + part * h : nullptr,
                   a.dbeta != nullptr ? dbeta_parts.data() + part * h : nullptr);
    }
  });
  for (int64_t i = 0; i < h; ++i) {
    double dgamma = 0.0, dbeta = 0.0;
    for (int64_t p = 0; p < chunks; ++p) {
      if (a.dgamma != nullptr) dgamma += dgamma_parts[p * h + i];
      if (a.dbeta != nullptr) dbeta += dbeta_parts[p * h + i];
    }
    if (a.dgamma != nullptr) a.dgamma[i] = static_cast<float>(dgamma);
    if (a.dbeta != nullptr) a.dbeta[i] = static_cast<float>(dbeta);
  }
  return Status::Ok();
}

}  // namespace normsvc::kernels
