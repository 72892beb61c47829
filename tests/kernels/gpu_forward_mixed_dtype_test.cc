// Batch invariance across dtypes: fp16 rows, rows whose output dtype differs
// from their input's, and fp32 parameters under narrow activations, each
// tensor alone and then all of them in one mixed multi-segment launch (with
// fp32 and bf16 rows of one dtype throughout among them), bit for bit.
// ForwardBatchInvariance.MixedLaunchMatchesEachTensorAlone covers fp32 and
// bf16 with every dtype the same.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

struct DTypes {
  DType x;
  DType out;
  DType param;
};

constexpr DTypes kDTypes[] = {
    {DType::kF16, DType::kF16, DType::kF16},   {DType::kF16, DType::kF16, DType::kF32},
    {DType::kF16, DType::kF32, DType::kF16},   {DType::kF16, DType::kBF16, DType::kF32},
    {DType::kBF16, DType::kF32, DType::kBF16}, {DType::kBF16, DType::kF16, DType::kF32},
    {DType::kF32, DType::kBF16, DType::kF32},  {DType::kF32, DType::kF16, DType::kF32},
    {DType::kF32, DType::kF32, DType::kF32},   {DType::kBF16, DType::kBF16, DType::kBF16},
};

// A row's bits depend neither on what else is in the launch nor on whether
// it runs as a table entry or alone, for every pairing of input, output and
// parameter dtypes above: each tensor alone (LaunchForwardSegment), then all
// of them in one launch interleaved with one-row segments of their first
// rows (the same values to the same places), with the table from pageable
// memory and from pinned staging (CheckMixedLaunchBothWays). A kernel whose
// configuration (vector width, rows a block, cluster) followed the launch's
// mix, or that read one segment's dtypes for another's in a shared group,
// gives other bits there.
TEST(ForwardBatchInvariance, MixedDtypesMatchEachTensorAlone) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("batch invariance, mixed dtypes");
  std::vector<std::unique_ptr<ForwardCase>> cases;
  const int64_t hidden_sizes[] = {5, 64, 768, 2049, 4096, 8192, 12289, 65536};
  for (int hi = 0; hi < static_cast<int>(std::size(hidden_sizes)); ++hi) {
    const int64_t hidden = hidden_sizes[hi];
    for (int di = 0; di < static_cast<int>(std::size(kDTypes)); ++di) {
      const DTypes& d = kDTypes[di];
      ForwardSpec spec;
      // Both ops for every dtype pairing, across the hidden sizes.
      spec.op = (hi + di) % 2 ? NormOp::kRmsNorm : NormOp::kLayerNorm;
      spec.x_dtype = d.x;
      spec.out_dtype = d.out;
      spec.param_dtype = d.param;
      spec.rows = hidden >= 65536 ? 4 : 37;
      spec.hidden = hidden;
      spec.residual = spec.residual_out = spec.stats = true;
      AddAlignedAndMisalignedPair(spec, rng, cases);
    }
  }
  std::vector<std::vector<uint8_t>> alone;
  for (auto& c : cases) {
    alone.push_back(RunAlone(*c));
    c->Check("alone");
  }
  for (std::size_t i = 1; i < cases.size(); i += 2) {
    EXPECT_EQ(alone[i - 1], alone[i]) << "misaligned copy differs: " << Describe(cases[i]->spec());
  }

  std::vector<ForwardSegment> segments;
  for (auto& c : cases) {
    segments.push_back(c->Segment());
    ForwardSegment one = c->Segment();
    one.rows = 1;
    segments.push_back(one);
  }
  CheckMixedLaunchBothWays(segments, cases, alone, "dtypes");
}

}  // namespace
}  // namespace normsvc::kernels::testing
