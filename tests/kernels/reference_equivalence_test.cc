// The CPU reference against its earlier implementation (reference_legacy.cc):
// every output bit must be the same, for every dtype, op, optional part,
// stride and thread count, on fresh random data that includes NaN, Inf,
// signed zeros, subnormals, constant rows and values at the dtype's limits.
// The reference is the oracle of every other test and the CPU backend, so a
// faster version may not move a single bit. One exception, explained at
// nan_payload_differences: an element that is NaN in both may differ in the
// NaN's sign and payload (which the source does not determine).
//
// The seed is printed; NORMSVC_TEST_SEED=<n> reruns one case set.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/reference.h"
#include "reference_legacy.h"

namespace normsvc::kernels {
namespace {

constexpr uint8_t kPoison = 0xA5;
constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr NormOp kOps[] = {NormOp::kLayerNorm, NormOp::kRmsNorm};
constexpr int64_t kHiddens[] = {1, 5, 64, 2049, 4096, 8191};

using Bytes = std::vector<uint8_t>;

uint64_t Seed() {
  static const uint64_t seed = [] {
    const char* fixed = std::getenv("NORMSVC_TEST_SEED");
    const uint64_t s = fixed != nullptr
                           ? std::strtoull(fixed, nullptr, 10)
                           : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    std::printf("reference_equivalence_test seed: %llu (NORMSVC_TEST_SEED to repeat)\n",
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

float LargestFinite(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 65504.0f;
    case DType::kBF16:
      return 3.3895314e38f;
    case DType::kF32:
      break;
  }
  return std::numeric_limits<float>::max();
}

float SmallestSubnormal(DType dtype) {
  return dtype == DType::kF16 ? 5.9604645e-8f : std::numeric_limits<float>::denorm_min();
}

// One row's values: mostly normal data at random scale and offset; some rows
// are constant, far from zero, at the dtype's limits, or hold specials.
void FillRow(std::mt19937_64& rng, DType dtype, int64_t hidden, uint8_t* row) {
  std::uniform_int_distribution<int> kind_of(0, 9);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int kind = kind_of(rng);
  const double scale = std::exp2(unit(rng) * 16.0 - 8.0);
  const double offset = kind == 6 ? 1000.0 : (unit(rng) - 0.5) * 4.0;
  std::normal_distribution<double> normal(offset, scale);
  const float constant = static_cast<float>(normal(rng));
  const float limit = LargestFinite(dtype);
  const float specials[] = {NAN,   INFINITY, -INFINITY, 0.0f,
                            -0.0f, limit,    -limit,    SmallestSubnormal(dtype)};
  for (int64_t i = 0; i < hidden; ++i) {
    float value = kind == 7 ? constant : static_cast<float>(normal(rng));
    if (kind == 8 && unit(rng) < 0.5) value = limit * static_cast<float>(unit(rng) - 0.5);
    if (kind == 9 && unit(rng) < 0.05) value = specials[rng() % std::size(specials)];
    StoreFromFloat(row, dtype, i, value);
  }
}

// rows x stride elements; the padding between rows is random bytes (the
// reference must ignore it).
Bytes RandomRows(std::mt19937_64& rng, DType dtype, int64_t rows, int64_t hidden, int64_t stride) {
  const std::size_t size = DTypeSize(dtype);
  Bytes bytes(static_cast<std::size_t>(rows * stride) * size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t r = 0; r < rows; ++r) FillRow(rng, dtype, hidden, bytes.data() + r * stride * size);
  return bytes;
}

int64_t RandomStride(std::mt19937_64& rng, int64_t hidden) {
  return rng() % 2 == 0 ? hidden : hidden + 1 + static_cast<int64_t>(rng() % 37);
}

// Outputs of one run; every buffer starts as poison.
struct Outputs {
  Bytes out, residual_out, mean, rstd;
};

// A forward call's inputs, and where a run writes.
struct ForwardCase {
  ForwardSegment segment;
  Bytes x, residual, gamma, beta;
  std::size_t out_bytes = 0, residual_out_bytes = 0;
  bool has_residual_out = false, has_mean = false, has_rstd = false;
};

ForwardCase MakeForwardCase(std::mt19937_64& rng, NormOp op, DType x_dtype, DType out_dtype,
                            DType param_dtype, int64_t rows, int64_t hidden, bool residual) {
  ForwardCase c;
  ForwardSegment& s = c.segment;
  s.op = op;
  s.rows = rows;
  s.hidden = hidden;
  const float epsilons[] = {1e-5f, 1e-6f, 1e-12f, 0.25f};
  s.epsilon = epsilons[rng() % std::size(epsilons)];
  s.x_dtype = x_dtype;
  s.out_dtype = out_dtype;
  s.param_dtype = param_dtype;
  s.x_row_stride = RandomStride(rng, hidden);
  c.x = RandomRows(rng, x_dtype, rows, hidden, s.x_row_stride);
  if (residual) {
    s.residual_row_stride = RandomStride(rng, hidden);
    c.residual = RandomRows(rng, x_dtype, rows, hidden, s.residual_row_stride);
    c.has_residual_out = rng() % 3 != 0;
    s.residual_out_row_stride = RandomStride(rng, hidden);
    c.residual_out_bytes = rows * s.residual_out_row_stride * DTypeSize(x_dtype);
  }
  if (rng() % 4 != 0) c.gamma = RandomRows(rng, param_dtype, 1, hidden, hidden);
  if (op == NormOp::kLayerNorm && rng() % 4 != 0) {
    c.beta = RandomRows(rng, param_dtype, 1, hidden, hidden);
  }
  s.out_row_stride = RandomStride(rng, hidden);
  c.out_bytes = rows * s.out_row_stride * DTypeSize(out_dtype);
  c.has_mean = op == NormOp::kLayerNorm && rng() % 3 != 0;
  c.has_rstd = rng() % 3 != 0;
  return c;
}

// Points the segment at `c`'s inputs and at freshly poisoned outputs in `o`.
ForwardSegment Bind(ForwardCase& c, Outputs& o) {
  ForwardSegment s = c.segment;
  s.x = c.x.data();
  s.residual = c.residual.empty() ? nullptr : c.residual.data();
  s.gamma = c.gamma.empty() ? nullptr : c.gamma.data();
  s.beta = c.beta.empty() ? nullptr : c.beta.data();
  o.out.assign(c.out_bytes, kPoison);
  s.out = o.out.data();
  o.residual_out.assign(c.has_residual_out ? c.residual_out_bytes : 0, kPoison);
  s.residual_out = c.has_residual_out ? o.residual_out.data() : nullptr;
  o.mean.assign(c.has_mean ? s.rows * sizeof(float) : 0, kPoison);
  s.mean = c.has_mean ? reinterpret_cast<float*>(o.mean.data()) : nullptr;
  o.rstd.assign(c.has_rstd ? s.rows * sizeof(float) : 0, kPoison);
  s.rstd = c.has_rstd ? reinterpret_cast<float*>(o.rstd.data()) : nullptr;
  return s;
}

std::string Describe(const ForwardSegment& s) {
  return std::string(NormOpName(s.op)) + " x=" + DTypeName(s.x_dtype) +
         " out=" + DTypeName(s.out_dtype) + " param=" + DTypeName(s.param_dtype) +
         " rows=" + std::to_string(s.rows) + " hidden=" + std::to_string(s.hidden) +
         (s.residual ? " residual" : "") + (s.residual_out ? "+out" : "") +
         (s.gamma ? " gamma" : "") + (s.beta ? " beta" : "") + (s.mean ? " mean" : "") +
         (s.rstd ? " rstd" : "") + " eps=" + std::to_string(s.epsilon);
}

// Elements that are NaN in both results but differ in sign or payload. IEEE
// 754 leaves open which operand's NaN an operation returns, and x86 returns
// the first operand's: which one that is for a commutative operation (a + b,
// a * b) is the compiler's choice of registers, not something the source
// states, and it differs between the scalar and the vectorized form of the
// same expression. Counted and printed; every other bit must match.
int64_t nan_payload_differences = 0;

enum class Element { kF32, kF16, kBF16, kF64 };

Element ElementOf(DType dtype) {
  return dtype == DType::kF16    ? Element::kF16
         : dtype == DType::kBF16 ? Element::kBF16
                                 : Element::kF32;
}

std::size_t ElementSize(Element e) { return e == Element::kF64 ? 8 : e == Element::kF32 ? 4 : 2; }

bool IsNan(const uint8_t* p, Element e) {
  switch (e) {
    case Element::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return std::isnan(v);
    }
    case Element::kF16:
    case Element::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return (bits & 0x7fffu) > (e == Element::kF16 ? 0x7c00u : 0x7f80u);
    }
    case Element::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return std::isnan(v);
    }
  }
  return false;
}

// Bit-for-bit equality of every element (poisoned padding included) except
// the NaN sign/payload case above; on failure, the first differing element.
void ExpectSameBits(const Bytes& expected, const Bytes& actual, Element e,
                    const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  if (expected.empty() || std::memcmp(expected.data(), actual.data(), expected.size()) == 0) {
    return;
  }
  const std::size_t size = ElementSize(e);
  for (std::size_t at = 0; at < expected.size(); at += size) {
    const uint8_t* x = expected.data() + at;
    const uint8_t* y = actual.data() + at;
    if (std::memcmp(x, y, size) == 0) continue;
    if (IsNan(x, e) && IsNan(y, e)) {
      ++nan_payload_differences;
      continue;
    }
    uint64_t x_bits = 0, y_bits = 0;
    std::memcpy(&x_bits, x, size);
    std::memcpy(&y_bits, y, size);
    char text[64];
    std::snprintf(text, sizeof(text), "0x%llx expected, 0x%llx", (unsigned long long)x_bits,
                  (unsigned long long)y_bits);
    ADD_FAILURE() << what << ": element " << at / size << " differs (" << text << ")";
    return;
  }
}

void PrintNanPayloadDifferences() {
  std::printf("NaN elements differing only in sign/payload: %lld\n",
              static_cast<long long>(nan_payload_differences));
  nan_payload_differences = 0;
}

// Both implementations over the same segments (one call each, all segments
// together) with the same options; every output must match. With
// `share_params`, a segment whose H and parameter dtype match an earlier
// one's reads that one's gamma/beta arrays (as a server batch's segments do
// that name one registered set).
void CheckForward(std::vector<ForwardCase>& cases, const ReferenceOptions& options,
                  bool share_params = false) {
  std::vector<Outputs> old_outputs(cases.size()), new_outputs(cases.size());
  std::vector<ForwardSegment> old_segments, new_segments;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    old_segments.push_back(Bind(cases[i], old_outputs[i]));
    new_segments.push_back(Bind(cases[i], new_outputs[i]));
    for (std::size_t j = 0; share_params && j < i; ++j) {
      const ForwardSegment& earlier = new_segments[j];
      ForwardSegment& s = new_segments[i];
      if (earlier.hidden != s.hidden || earlier.param_dtype != s.param_dtype) continue;
      if (s.gamma != nullptr && earlier.gamma != nullptr)
        s.gamma = old_segments[i].gamma = earlier.gamma;
      if (s.beta != nullptr && earlier.beta != nullptr)
        s.beta = old_segments[i].beta = earlier.beta;
      break;
    }
  }
  const int count = static_cast<int>(cases.size());
  ASSERT_TRUE(legacy::ReferenceForward(old_segments.data(), count, options).ok());
  ASSERT_TRUE(ReferenceForward(new_segments.data(), count, options).ok());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string what = Describe(old_segments[i]) + " (segment " + std::to_string(i) + " of " +
                             std::to_string(count) +
                             ", max_threads=" + std::to_string(options.max_threads) + ")";
    // The old outputs were written: the comparison below is not of poison.
    ASSERT_NE(std::memcmp(old_outputs[i].out.data(), Bytes(4, kPoison).data(),
                          DTypeSize(old_segments[i].out_dtype)),
              0)
        << what;
    ExpectSameBits(old_outputs[i].out, new_outputs[i].out, ElementOf(old_segments[i].out_dtype),
                   what + " out");
    ExpectSameBits(old_outputs[i].residual_out, new_outputs[i].residual_out,
                   ElementOf(old_segments[i].x_dtype), what + " residual_out");
    ExpectSameBits(old_outputs[i].mean, new_outputs[i].mean, Element::kF32, what + " mean");
    ExpectSameBits(old_outputs[i].rstd, new_outputs[i].rstd, Element::kF32, what + " rstd");
  }
}

TEST(ReferenceEquivalence, ForwardMatchesEarlierImplementationBitForBit) {
  std::mt19937_64 rng(Seed());
  for (NormOp op : kOps) {
    for (DType x_dtype : kDTypes) {
      for (DType out_dtype : kDTypes) {
        for (DType param_dtype : kDTypes) {
          if (param_dtype != DType::kF32 && param_dtype != x_dtype) continue;
          for (int64_t hidden : kHiddens) {
            for (bool residual : {false, true}) {
              // One to three segments a call: the first is this combination,
              // the others share its dtypes with other shapes.
              std::vector<ForwardCase> cases;
              const int segments = 1 + static_cast<int>(rng() % 3);
              for (int k = 0; k < segments; ++k) {
                const int64_t h = k == 0 ? hidden : kHiddens[rng() % std::size(kHiddens)];
                const int64_t rows = 1 + static_cast<int64_t>(rng() % 7);
                const bool res = k == 0 ? residual : rng() % 2 == 0;
                cases.push_back(
                    MakeForwardCase(rng, op, x_dtype, out_dtype, param_dtype, rows, h, res));
              }
              CheckForward(cases, ReferenceOptions{static_cast<int>(rng() % 3)});
            }
          }
        }
      }
    }
  }
  PrintNanPayloadDifferences();
}

// Enough elements that the work is split over threads.
TEST(ReferenceEquivalence, ForwardMatchesWhenSplitOverThreads) {
  std::mt19937_64 rng(Seed() + 1);
  for (DType dtype : kDTypes) {
    for (int threads : {1, 2, 3, 0}) {
      std::vector<ForwardCase> cases;
      cases.push_back(
          MakeForwardCase(rng, NormOp::kLayerNorm, dtype, dtype, DType::kF32, 61, 8191, true));
      cases.push_back(MakeForwardCase(rng, NormOp::kRmsNorm, dtype, dtype, dtype, 40, 4096, false));
      CheckForward(cases, ReferenceOptions{threads});
    }
  }
  PrintNanPayloadDifferences();
}

// A server batch: many small segments of mixed H, split over threads
// across segment boundaries, some sharing their parameter arrays.
TEST(ReferenceEquivalence, ManySmallSegmentsMatchWhenSplitOverThreads) {
  std::mt19937_64 rng(Seed() + 2);
  constexpr int64_t kHidden[] = {4096, 2049, 1024, 5};
  for (int threads : {2, 3, 0}) {
    for (bool share : {false, true}) {
      std::vector<ForwardCase> cases;
      for (int k = 0; k < 70; ++k) {
        const DType dtype = kDTypes[rng() % std::size(kDTypes)];
        const NormOp op = rng() % 2 ? NormOp::kLayerNorm : NormOp::kRmsNorm;
        cases.push_back(MakeForwardCase(rng, op, dtype, dtype, rng() % 2 ? dtype : DType::kF32,
                                        1 + static_cast<int64_t>(rng() % 3),
                                        kHidden[rng() % std::size(kHidden)], rng() % 4 == 0));
      }
      CheckForward(cases, ReferenceOptions{threads}, share);
    }
  }
  PrintNanPayloadDifferences();
}

struct BackwardOutputs {
  Bytes dx, dgamma, dbeta;
};

struct BackwardCase {
  BackwardArgs args;
  Bytes x, dy, gamma;
  std::vector<float> mean, rstd;
  bool has_dgamma = false, has_dbeta = false;
};

BackwardCase MakeBackwardCase(std::mt19937_64& rng, NormOp op, DType x_dtype, DType param_dtype,
                              int64_t rows, int64_t hidden, bool saved_statistics) {
  BackwardCase c;
  BackwardArgs& a = c.args;
  a.op = op;
  a.rows = rows;
  a.hidden = hidden;
  const float epsilons[] = {1e-5f, 1e-6f, 1e-12f, 0.25f};
  a.epsilon = epsilons[rng() % std::size(epsilons)];
  a.x_dtype = x_dtype;
  a.param_dtype = param_dtype;
  a.x_row_stride = RandomStride(rng, hidden);
  c.x = RandomRows(rng, x_dtype, rows, hidden, a.x_row_stride);
  a.dy_row_stride = RandomStride(rng, hidden);
  c.dy = RandomRows(rng, x_dtype, rows, hidden, a.dy_row_stride);
  a.dx_row_stride = RandomStride(rng, hidden);
  if (rng() % 4 != 0) c.gamma = RandomRows(rng, param_dtype, 1, hidden, hidden);
  if (saved_statistics) {
    std::uniform_real_distribution<float> mean(-3.0f, 3.0f), rstd(0.05f, 20.0f);
    const float specials[] = {NAN, INFINITY, 0.0f};
    for (int64_t r = 0; r < rows; ++r) {
      if (op == NormOp::kLayerNorm) c.mean.push_back(mean(rng));
      c.rstd.push_back(rng() % 8 == 0 ? specials[rng() % 3] : rstd(rng));
    }
  }
  c.has_dgamma = rng() % 4 != 0;
  c.has_dbeta = op == NormOp::kLayerNorm && rng() % 4 != 0;
  return c;
}

BackwardArgs Bind(BackwardCase& c, BackwardOutputs& o) {
  BackwardArgs a = c.args;
  a.x = c.x.data();
  a.dy = c.dy.data();
  a.gamma = c.gamma.empty() ? nullptr : c.gamma.data();
  a.mean = c.mean.empty() ? nullptr : c.mean.data();
  a.rstd = c.rstd.empty() ? nullptr : c.rstd.data();
  o.dx.assign(a.rows * a.dx_row_stride * DTypeSize(a.x_dtype), kPoison);
  a.dx = o.dx.data();
  o.dgamma.assign(c.has_dgamma ? a.hidden * sizeof(float) : 0, kPoison);
  a.dgamma = c.has_dgamma ? reinterpret_cast<float*>(o.dgamma.data()) : nullptr;
  o.dbeta.assign(c.has_dbeta ? a.hidden * sizeof(float) : 0, kPoison);
  a.dbeta = c.has_dbeta ? reinterpret_cast<float*>(o.dbeta.data()) : nullptr;
  return a;
}

void CheckBackward(BackwardCase& c, const ReferenceOptions& options) {
  BackwardOutputs old_outputs, new_outputs;
  const BackwardArgs old_args = Bind(c, old_outputs);
  const BackwardArgs new_args = Bind(c, new_outputs);
  const std::string what =
      std::string(NormOpName(c.args.op)) + " x=" + DTypeName(c.args.x_dtype) +
      " param=" + DTypeName(c.args.param_dtype) + " rows=" + std::to_string(c.args.rows) +
      " hidden=" + std::to_string(c.args.hidden) + (c.gamma.empty() ? "" : " gamma") +
      (c.rstd.empty() ? "" : " saved") + (c.has_dgamma ? " dgamma" : "") +
      (c.has_dbeta ? " dbeta" : "") + " max_threads=" + std::to_string(options.max_threads);
  ASSERT_TRUE(legacy::ReferenceBackward(old_args, options).ok()) << what;
  ASSERT_TRUE(ReferenceBackward(new_args, options).ok()) << what;
  ASSERT_NE(std::memcmp(old_outputs.dx.data(), Bytes(4, kPoison).data(), DTypeSize(c.args.x_dtype)),
            0)
      << what;
  ExpectSameBits(old_outputs.dx, new_outputs.dx, ElementOf(c.args.x_dtype), what + " dx");
  ExpectSameBits(old_outputs.dgamma, new_outputs.dgamma, Element::kF32, what + " dgamma");
  ExpectSameBits(old_outputs.dbeta, new_outputs.dbeta, Element::kF32, what + " dbeta");
}

TEST(ReferenceEquivalence, BackwardMatchesEarlierImplementationBitForBit) {
  std::mt19937_64 rng(Seed() + 2);
  for (NormOp op : kOps) {
    for (DType x_dtype : kDTypes) {
      for (DType param_dtype : kDTypes) {
        if (param_dtype != DType::kF32 && param_dtype != x_dtype) continue;
        for (int64_t hidden : kHiddens) {
          for (bool saved : {false, true}) {
            BackwardCase c = MakeBackwardCase(rng, op, x_dtype, param_dtype,
                                              1 + static_cast<int64_t>(rng() % 7), hidden, saved);
            CheckBackward(c, ReferenceOptions{static_cast<int>(rng() % 3)});
          }
        }
      }
    }
  }
  PrintNanPayloadDifferences();
}

// dgamma/dbeta are reduced per thread chunk, then over chunks in order: the
// split must be the same as before for every thread count.
TEST(ReferenceEquivalence, BackwardMatchesWhenSplitOverThreads) {
  std::mt19937_64 rng(Seed() + 3);
  for (DType dtype : kDTypes) {
    for (int threads : {1, 2, 3, 0}) {
      for (NormOp op : kOps) {
        BackwardCase c = MakeBackwardCase(rng, op, dtype, DType::kF32, 45, 8191, threads % 2 == 0);
        c.has_dgamma = true;
        c.has_dbeta = op == NormOp::kLayerNorm;
        CheckBackward(c, ReferenceOptions{threads});
      }
    }
  }
  PrintNanPayloadDifferences();
}

// The double-precision row oracle: y, sum, mean and rstd, bit for bit.
TEST(ReferenceEquivalence, ForwardRowMatchesEarlierImplementationBitForBit) {
  std::mt19937_64 rng(Seed() + 4);
  std::normal_distribution<double> normal(0.5, 3.0);
  auto row = [&](int64_t hidden, bool present) {
    std::vector<double> values;
    if (!present) return values;
    for (int64_t i = 0; i < hidden; ++i) values.push_back(normal(rng));
    if (rng() % 4 == 0) values[rng() % hidden] = rng() % 2 ? -0.0 : NAN;
    return values;
  };
  auto data = [](const std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  auto bytes = [](const std::vector<double>& v) {
    return Bytes(reinterpret_cast<const uint8_t*>(v.data()),
                 reinterpret_cast<const uint8_t*>(v.data() + v.size()));
  };
  for (NormOp op : kOps) {
    for (int64_t hidden : kHiddens) {
      for (int variant = 0; variant < 8; ++variant) {
        const std::vector<double> x = row(hidden, true), residual = row(hidden, variant & 1),
                                  gamma = row(hidden, variant & 2),
                                  beta = row(hidden, (variant & 4) && op == NormOp::kLayerNorm);
        const double epsilon = 1e-5 * (1 + variant);
        const RowResult expected = legacy::ReferenceForwardRow(
            op, x.data(), data(residual), data(gamma), data(beta), hidden, epsilon);
        const RowResult actual = ReferenceForwardRow(op, x.data(), data(residual), data(gamma),
                                                     data(beta), hidden, epsilon);
        const std::string what = std::string(NormOpName(op)) + " hidden=" + std::to_string(hidden) +
                                 " variant=" + std::to_string(variant);
        ExpectSameBits(bytes(expected.y), bytes(actual.y), Element::kF64, what + " y");
        ExpectSameBits(bytes(expected.sum), bytes(actual.sum), Element::kF64, what + " sum");
        ExpectSameBits(bytes({expected.mean, expected.rstd}), bytes({actual.mean, actual.rstd}),
                       Element::kF64, what + " mean/rstd");
      }
    }
  }
  PrintNanPayloadDifferences();
}

}  // namespace
}  // namespace normsvc::kernels
