#include "normsvc/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "normsvc/kernels/float16.h"
#include "reference_chunks.h"
#include "row_codec.h"
#include "run_tasks.h"

// Speed without changing a bit: every element goes through the same double
// operations, and every sum adds the same terms in the same order, as the
// straightforward per-element version (tests/kernels/reference_legacy.cc,
// checked byte for byte by reference_equivalence_test). What is gone is the
// overhead around them: rows are decoded and encoded a whole row at a time
// with the dtype switch outside the loop and the conversions inlined, the
// forward reads gamma and beta as stored (no decoded copy a call), scratch
// rows are allocated once per thread instead of several times per row, the
// forward no longer normalizes the unrounded residual sum only to discard it,
// and loops without a reduction vectorize.

namespace normsvc::kernels {
namespace {

using detail::DecodeRow;
using detail::EncodeRow;
using detail::LoadElement;
using detail::RunTasks;
using detail::StoreElement;
using detail::WithDType;

// Below this many elements a call runs on the calling thread only.
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

Status OutOfMemory() {
  return Status(Code::kResourceExhausted, "the reference kernels ran out of memory");
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

// A contiguous run of one segment's rows.
struct RowRange {
  int segment;
  int64_t begin, end;
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

// Rows whose statistics are taken together (RowGroupStatistics).
constexpr int kInterleavedRows = 4;

// Statistics of `n` rows of `hidden` elements each, rows[k] for k < n <=
// kInterleavedRows: for each row the same additions in the same order as
// Statistics (so the same bits), with the rows' sums interleaved element by
// element. A row's sum is a chain of dependent additions, bound by their
// latency; the rows' chains are independent, so N of them interleaved take
// about the time of one. N is a template parameter so that the chains stay
// in registers. (Measured: 64 rows of fp32 4096 on one thread 7.86 -> 5.30
// us a row; 8 rows at a time gained nothing more: the decoding, normalizing
// and encoding passes are the rest.)
template <int N>
void InterleavedStatistics(NormOp op, const double* const* rows, int64_t hidden,
                           const double* epsilon, RowStatistics* out) {
  double mean[N] = {};
  if (op == NormOp::kLayerNorm) {
    for (int64_t i = 0; i < hidden; ++i) {
      for (int k = 0; k < N; ++k) mean[k] += rows[k][i];
    }
    for (int k = 0; k < N; ++k) mean[k] /= static_cast<double>(hidden);
  }
  double second_moment[N] = {};
  for (int64_t i = 0; i < hidden; ++i) {
    for (int k = 0; k < N; ++k) {
      const double centred = rows[k][i] - mean[k];
      second_moment[k] += centred * centred;
    }
  }
  for (int k = 0; k < N; ++k) {
    second_moment[k] /= static_cast<double>(hidden);
    out[k] = {mean[k], 1.0 / std::sqrt(second_moment[k] + epsilon[k])};
  }
}

void RowGroupStatistics(NormOp op, const double* const* rows, int n, int64_t hidden,
                        const double* epsilon, RowStatistics* out) {
  switch (n) {
    case 1:
      return InterleavedStatistics<1>(op, rows, hidden, epsilon, out);
    case 2:
      return InterleavedStatistics<2>(op, rows, hidden, epsilon, out);
    case 3:
      return InterleavedStatistics<3>(op, rows, hidden, epsilon, out);
    default:
      return InterleavedStatistics<kInterleavedRows>(op, rows, hidden, epsilon, out);
  }
}

// y = (v - mean) * rstd, times gamma, plus beta (each optional). y may be v.
// (NormalizeInto does the same on parameters as stored, and writes the
// output's dtype.)
void Normalize(const double* v, RowStatistics stats, const double* gamma, const double* beta,
               int64_t hidden, double* y) {
  for (int64_t i = 0; i < hidden; ++i) y[i] = (v[i] - stats.mean) * stats.rstd;
  if (gamma) {
    for (int64_t i = 0; i < hidden; ++i) y[i] *= gamma[i];
  }
  if (beta) {
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

// Scratch doubles a row of `s` needs (its values, and its residual's).
int64_t ForwardScratch(const ForwardSegment& s) {
  return s.residual != nullptr ? 2 * s.hidden : s.hidden;
}

// Row r of `s` into v (hidden doubles; `residual` another hidden when the
// segment has a residual): x, plus the residual rounded to x's dtype (also
// written to residual_out), plus 0.0 as ReferenceForwardRow sums it (-0
// becomes +0, which the sign of a zero output shows).
void LoadForwardRow(const ForwardSegment& s, int64_t r, double* v, double* residual) {
  const int64_t h = s.hidden;
  const void* x = ElementPtr(s.x, s.x_dtype, r, s.x_row_stride);
  if (s.residual == nullptr) {  // decoded and + 0.0 in one pass
    WithDType(s.x_dtype, [&](auto d) {
      for (int64_t i = 0; i < h; ++i) v[i] = static_cast<double>(LoadElement<d()>(x, i)) + 0.0;
    });
    return;
  }
  DecodeRow(x, s.x_dtype, h, v);
  DecodeRow(ElementPtr(s.residual, s.x_dtype, r, s.residual_row_stride), s.x_dtype, h, residual);
  void* sum_row = s.residual_out != nullptr
                      ? ElementPtr(s.residual_out, s.x_dtype, r, s.residual_out_row_stride)
                      : nullptr;
  AddResidualRounded(v, residual, h, s.x_dtype, sum_row);
  for (int64_t i = 0; i < h; ++i) v[i] += 0.0;
}

// out[i] = Normalize's y[i] (the same double operations in the same order,
// gamma and beta read as stored and widened exactly), rounded as EncodeRow
// rounds it: one pass over the row instead of four.
template <DType P, DType O, bool kGamma, bool kBeta>
void NormalizeInto(const double* v, RowStatistics stats, const void* gamma, const void* beta,
                   int64_t hidden, void* out) {
  for (int64_t i = 0; i < hidden; ++i) {
    double y = (v[i] - stats.mean) * stats.rstd;
    if constexpr (kGamma) y *= static_cast<double>(LoadElement<P>(gamma, i));
    if constexpr (kBeta) y += static_cast<double>(LoadElement<P>(beta, i));
    StoreElement<O>(out, i, static_cast<float>(y));
  }
}

// Normalizes row r of `s` (in v) with its statistics and writes out, mean
// and rstd.
void StoreForwardRow(const ForwardSegment& s, int64_t r, RowStatistics stats, const double* v) {
  void* out = ElementPtr(s.out, s.out_dtype, r, s.out_row_stride);
  WithDType(s.param_dtype, [&](auto p) {
    WithDType(s.out_dtype, [&](auto o) {
      const auto run = [&](auto gamma, auto beta) {
        NormalizeInto<p(), o(), decltype(gamma)::value, decltype(beta)::value>(
            v, stats, s.gamma, s.beta, s.hidden, out);
      };
      if (s.gamma != nullptr && s.beta != nullptr) {
        run(std::true_type{}, std::true_type{});
      } else if (s.gamma != nullptr) {
        run(std::true_type{}, std::false_type{});
      } else if (s.beta != nullptr) {
        run(std::false_type{}, std::true_type{});
      } else {
        run(std::false_type{}, std::false_type{});
      }
    });
  });
  if (s.mean != nullptr) s.mean[r] = static_cast<float>(stats.mean);
  if (s.rstd != nullptr) s.rstd[r] = static_cast<float>(stats.rstd);
}

// One thread's rows (its RowRanges, in order), up to kInterleavedRows of
// one op and hidden size at a time: each row is loaded alone, the group's
// statistics are taken together (RowGroupStatistics: each row's bits as
// alone), then each row is normalized and written alone. `scratch` holds
// kInterleavedRows * ForwardScratch doubles for the largest segment.
void ForwardThreadRows(const ForwardSegment* segments, const std::vector<RowRange>& ranges,
                       int64_t row_doubles, double* scratch) {
  struct Pending {
    const ForwardSegment* segment;
    int64_t row;
  };
  Pending pending[kInterleavedRows];
  const double* rows[kInterleavedRows];
  double epsilon[kInterleavedRows];
  int count = 0;
  const auto flush = [&] {
    if (count == 0) return;
    RowStatistics stats[kInterleavedRows];
    RowGroupStatistics(pending[0].segment->op, rows, count, pending[0].segment->hidden, epsilon,
                       stats);
    for (int k = 0; k < count; ++k) {
      StoreForwardRow(*pending[k].segment, pending[k].row, stats[k], scratch + k * row_doubles);
    }
    count = 0;
  };
  for (const RowRange& range : ranges) {
    const ForwardSegment& s = segments[range.segment];
    for (int64_t r = range.begin; r < range.end; ++r) {
      if (count > 0 && (pending[0].segment->op != s.op || pending[0].segment->hidden != s.hidden)) {
        flush();
      }
      double* v = scratch + count * row_doubles;
      LoadForwardRow(s, r, v, v + s.hidden);
      pending[count] = {&s, r};
      rows[count] = v;
      epsilon[count] = s.epsilon;
      if (++count == kInterleavedRows) flush();
    }
  }
  flush();
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

// The rows of all segments, in order, split into at most `threads` lists of
// about total / threads elements each (a row goes to the list its first
// element falls in).
std::vector<std::vector<RowRange>> SplitRows(const ForwardSegment* segments, int count, int threads,
                                             int64_t total) {
  std::vector<std::vector<RowRange>> work(std::max(threads, 1));
  const int lists = static_cast<int>(work.size());
  int64_t offset = 0;  // elements before the segment
  for (int i = 0; i < count; ++i) {
    const ForwardSegment& s = segments[i];
    for (int64_t r = 0; r < s.rows;) {
      const int t =
          static_cast<int>(std::min<int64_t>(lists - 1, (offset + r * s.hidden) * lists / total));
      // First row of the next list: the first whose start reaches its
      // boundary, ceil((t + 1) * total / lists).
      const int64_t boundary = ((static_cast<int64_t>(t) + 1) * total + lists - 1) / lists;
      int64_t end = t + 1 == lists ? s.rows : (boundary - offset + s.hidden - 1) / s.hidden;
      end = std::clamp<int64_t>(end, r + 1, s.rows);
      work[t].push_back({i, r, end});
      r = end;
    }
    offset += s.rows * s.hidden;
  }
  while (!work.empty() && work.back().empty()) work.pop_back();
  return work;
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
  if (Status st = ValidateForwardSegments(segments, count); !st.ok()) return st;
  // Rows of every segment share the threads (a server batch is many small
  // segments): each row is computed alone, so the split changes no bit.
  int64_t elements = 0;
  for (int i = 0; i < count; ++i) elements += segments[i].rows * segments[i].hidden;
  if (elements == 0) return Status::Ok();
  try {
    const std::vector<std::vector<RowRange>> work =
        SplitRows(segments, count, ThreadCount(options, elements), elements);
    return RunTasks(static_cast<int>(work.size()), [&](int t) {
      // One scratch allocation a thread, left uninitialized (every row writes
      // it before reading).
      int64_t row_doubles = 0;
      for (const RowRange& range : work[t]) {
        row_doubles = std::max(row_doubles, ForwardScratch(segments[range.segment]));
      }
      const std::unique_ptr<double[]> scratch(new double[kInterleavedRows * row_doubles]);
      ForwardThreadRows(segments, work[t], row_doubles, scratch.get());
    });
  } catch (const std::bad_alloc&) {
    return OutOfMemory();
  }
}

namespace {

// ReferenceBackward after validation; std::bad_alloc may leave it.
Status ReferenceBackwardValidated(const BackwardArgs& a, const ReferenceOptions& options) {
  const int64_t h = a.hidden;
  const std::vector<double> gamma = DecodeParam(a.gamma, a.param_dtype, h);
  // Per-chunk column partials, summed in chunk order: the chunks follow the
  // shape (reference_chunks.h), so the bits do not depend on the threads.
  const int64_t chunk = detail::BackwardChunkRows(a.rows, h);
  const int64_t chunks = (a.rows + chunk - 1) / chunk;
  const int workers = static_cast<int>(std::min<int64_t>(ThreadCount(options, a.rows * h), chunks));
  std::vector<double> dgamma_parts(a.dgamma != nullptr ? chunks * h : 0, 0.0);
  std::vector<double> dbeta_parts(a.dbeta != nullptr ? chunks * h : 0, 0.0);
  const Status status = RunTasks(workers, [&](int worker) {
    for (int64_t part = worker; part < chunks; part += workers) {
      const int64_t begin = part * chunk;
      BackwardRows(a, DataOrNull(gamma), begin, std::min(a.rows, begin + chunk),
                   a.dgamma != nullptr ? dgamma_parts.data() + part * h : nullptr,
                   a.dbeta != nullptr ? dbeta_parts.data() + part * h : nullptr);
    }
  });
  if (!status.ok()) return status;
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

}  // namespace

Status ReferenceBackward(const BackwardArgs& a, const ReferenceOptions& options) {
  if (Status st = ValidateBackwardArgs(a); !st.ok()) return st;
  try {
    return ReferenceBackwardValidated(a, options);
  } catch (const std::bad_alloc&) {
    return OutOfMemory();
  }
}

}  // namespace normsvc::kernels
