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
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "normsvc/kernels/reference.h"
#include "reference_equivalence_support.h"
#include "reference_legacy.h"

namespace normsvc::kernels {
namespace {

using namespace equivalence;

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
    // Left all poison (by chance, for a few elements), the segment runs
    // again over another poison, which it must overwrite.
    if (!AnyByteDiffers(old_outputs[i].out, kPoison)) {
      std::fill(old_outputs[i].out.begin(), old_outputs[i].out.end(), kOtherPoison);
      ASSERT_TRUE(legacy::ReferenceForward(&old_segments[i], 1, options).ok());
      ASSERT_TRUE(AnyByteDiffers(old_outputs[i].out, kOtherPoison)) << what;
    }
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
