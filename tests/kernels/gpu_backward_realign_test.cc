// BackwardRealignKernel (kernels/src/backward_realign_kernel.cuh): its rows
// at every kind of offset against the double reference, the strided
// fallback, and the workspace its partials need.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <gtest/gtest.h>

#include "gpu_backward_case.h"
#include "gpu_test_support.h"
#include "kernel_registry.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

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

}  // namespace
}  // namespace normsvc::kernels::testing
