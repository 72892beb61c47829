// The CPU reference's backward against its earlier implementation
// (reference_equivalence_test.cc has the forward and the contract): dx,
// dgamma and dbeta bit for bit, with and without saved statistics, for every
// thread count.
#include <algorithm>
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
  // The old dx was written: the comparison below is not of poison. Left all
  // poison (by chance, for a few elements), the case runs again into fresh
  // outputs over another poison, which it must overwrite.
  if (!AnyByteDiffers(old_outputs.dx, kPoison)) {
    BackwardOutputs again;
    const BackwardArgs again_args = Bind(c, again);
    std::fill(again.dx.begin(), again.dx.end(), kOtherPoison);
    ASSERT_TRUE(legacy::ReferenceBackward(again_args, options).ok()) << what;
    ASSERT_TRUE(AnyByteDiffers(again.dx, kOtherPoison)) << what;
  }
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

// dgamma/dbeta are reduced per chunk of rows, then over the chunks in order;
// the chunks follow the shape, so every thread count gives the earlier
// implementation's bits.
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
}  // namespace
}  // namespace normsvc::kernels
