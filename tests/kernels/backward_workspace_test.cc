// BackwardWorkspaceBytes against the unit planners themselves: whatever
// dtype and kernel a backward launch of `rows` rows takes, its dgamma/dbeta
// partials (two rows of H floats a unit) fit; and it never shrinks as rows
// grow, so a workspace sized for a caller's largest launch serves every
// smaller one (the server sizes each slot's workspace that way at start);
// and a misaligned workspace is refused. Host code only: runs without a GPU
// wherever the kernels are built.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

std::size_t PartialBytes(int64_t units, int64_t hidden) {
  return static_cast<std::size_t>(2 * units * hidden) * sizeof(float);
}

TEST(BackwardWorkspace, HoldsEveryLaunchAndNeverShrinksAsRowsGrow) {
  std::vector<int64_t> row_counts;
  for (int64_t rows = 1; rows <= 2500; ++rows) row_counts.push_back(rows);
  for (int64_t rows : {4096, 10007, 65536, 1 << 20}) row_counts.push_back(rows);
  for (int64_t hidden :
       {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{257}, int64_t{300}, int64_t{768},
        int64_t{2049}, int64_t{4096}, int64_t{8191}, int64_t{12289}, int64_t{16384}, int64_t{40960},
        int64_t{65536}, int64_t{65537}, int64_t{262144}, kMaxHidden}) {
    std::size_t previous = 0;
    for (int64_t rows : row_counts) {
      const std::size_t bytes = BackwardWorkspaceBytes(rows, hidden);
      ASSERT_GE(bytes, previous) << "H " << hidden << " rows " << rows;
      previous = bytes;
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
          ASSERT_LE(PartialBytes(detail::PlanBackwardUnits(rows, hidden, dtype, op).units, hidden),
                    bytes)
              << DTypeName(dtype) << " op " << static_cast<int>(op) << " H " << hidden << " rows "
              << rows;
        }
        const detail::KernelPlan realign = detail::PlanBackwardRealign(hidden, dtype);
        if (realign.slots == 0) continue;
        for (int period = 1; period <= detail::VectorWidth(dtype); ++period) {
          if (detail::VectorWidth(dtype) % period != 0) continue;  // RealignPeriod divides it
          ASSERT_LE(
              PartialBytes(detail::PlanRealignedBackwardUnits(rows, hidden, realign, period).units,
                           hidden),
              bytes)
              << "realigned " << DTypeName(dtype) << " H " << hidden << " rows " << rows
              << " period " << period;
        }
      }
    }
  }
  EXPECT_EQ(BackwardWorkspaceBytes(0, 4096), 0u);
  EXPECT_EQ(BackwardWorkspaceBytes(10, kMaxHidden + 1), 0u);
}

// A workspace off a 16-byte boundary is refused before anything reaches the
// device (the partials are 16-byte words): the pointers here are never
// dereferenced, so this runs without a GPU.
TEST(BackwardWorkspace, MisalignedWorkspaceIsAnInvalidArgument) {
  alignas(16) static float host[64];
  BackwardArgs a;
  a.op = NormOp::kLayerNorm;
  a.rows = 4;
  a.hidden = 4096;
  a.epsilon = 1e-5f;
  a.x_dtype = a.param_dtype = DType::kF32;
  a.x = a.dy = host;
  a.dx = host;
  a.x_row_stride = a.dy_row_stride = a.dx_row_stride = a.hidden;
  a.dgamma = host;
  const std::size_t bytes = BackwardWorkspaceBytes(a.rows, a.hidden) + 16;
  std::vector<unsigned char> workspace(bytes + 16);
  void* misaligned = reinterpret_cast<unsigned char*>(
                         (reinterpret_cast<std::uintptr_t>(workspace.data()) + 15) / 16 * 16) +
                     4;
  const Status st = LaunchBackward(a, misaligned, bytes, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("16-byte aligned"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace normsvc::kernels::testing
