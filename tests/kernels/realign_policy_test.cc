// The realigning forward's process-wide settings (kernels/src/realign_policy.h).
// Host code: runs on every build.
#include "realign_policy.h"

#include <gtest/gtest.h>

namespace normsvc::kernels::detail {
namespace {

TEST(RealignStages, OnlyCountsWithAStagedKernelAreAccepted) {
  const int before = GetRealignStages();
  for (int stages : {2, 3, 4}) {
    EXPECT_TRUE(SetRealignStages(stages)) << stages;
    EXPECT_EQ(GetRealignStages(), stages);
  }
  // Refused counts leave the setting as it was (4, set last above).
  for (int stages : {-1, 0, 1, 5, 64}) {
    EXPECT_FALSE(SetRealignStages(stages)) << stages;
    EXPECT_EQ(GetRealignStages(), 4) << stages;
  }
  EXPECT_TRUE(SetRealignStages(before));
}

}  // namespace
}  // namespace normsvc::kernels::detail
