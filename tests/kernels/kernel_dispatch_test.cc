// Every plan the planners produce has its kernels: the dispatchers
// (forward_instances.cuh, backward_instances.cuh) encode facts about the
// plans, such as which slot counts span clusters, and a plan without a
// kernel would only show as kInternal at launch. Host code only: runs
// without a GPU wherever the kernels are built.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_registry.h"
#include "launch_plan.h"

namespace normsvc::kernels::testing {
namespace {

using detail::KernelPlan;

std::vector<int64_t> HiddenSizes() {
  std::vector<int64_t> sizes;
  for (int64_t h = 1; h <= 4200; ++h) sizes.push_back(h);
  for (int64_t h = 4201; h <= kMaxHidden; h += 389) sizes.push_back(h);
  for (int64_t h : {8191, 8192, 12289, 16384, 32768, 65535, 65536, 131071, 131072, 262143}) {
    sizes.push_back(h);
  }
  sizes.push_back(kMaxHidden);
  return sizes;
}

std::string Where(DType dtype, int64_t hidden, const KernelPlan& plan) {
  return "dtype " + std::to_string(static_cast<int>(dtype)) + " H " + std::to_string(hidden) +
         " layout " + std::to_string(static_cast<int>(plan.layout)) + " slots " +
         std::to_string(plan.slots) + " cluster " + std::to_string(plan.cluster);
}

TEST(KernelDispatch, EveryForwardPlanHasItsKernels) {
  int checked = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t hidden : HiddenSizes()) {
      const KernelPlan plan = detail::PlanForward(hidden, dtype);
      const std::string where = Where(dtype, hidden, plan);
      for (DType param_dtype : {dtype, DType::kF32}) {
        for (bool single : {true, false}) {
          const bool whole_chunks =
              (plan.layout == detail::Layout::kVector || plan.layout == detail::Layout::kStaged) &&
              hidden % plan.width == 0;
          for (bool vectorized : {true, false}) {
            // 16-byte accesses need rows of whole chunks (forward_segments.cc).
            if (vectorized && !whole_chunks) continue;
            for (bool realignable : {true, false}) {
              const detail::ForwardPath path =
                  detail::ChooseForwardPath(plan, dtype, dtype, vectorized, realignable, true);
              ASSERT_NE(detail::FindForwardKernel(dtype, plan, path, param_dtype, single), nullptr)
                  << "path " << static_cast<int>(path) << " " << where;
              ++checked;
            }
          }
          ASSERT_NE(detail::FindForwardKernel(dtype, plan, detail::ForwardPath::kGeneral,
                                              param_dtype, single),
                    nullptr)
              << "general " << where;
          // Staged plans' lean path is its own kernel (ForwardStagedKernel<T, true>).
          if (plan.layout == detail::Layout::kStaged) {
            ASSERT_NE(detail::FindForwardKernel(dtype, plan, detail::ForwardPath::kLean,
                                                param_dtype, single),
                      detail::FindForwardKernel(dtype, plan, detail::ForwardPath::kGeneral,
                                                param_dtype, single))
                << "lean staged " << where;
          }
          // The specialized kernel's variants, where it may serve the plan.
          if (whole_chunks &&
              detail::UsesParamStaging(plan, detail::ForwardPath::kLean, single, dtype, param_dtype,
                                       detail::ParamStaging::kOneWave)) {
            ASSERT_NE(detail::FindParamStagedForwardKernel(dtype, plan), nullptr)
                << "parameters staged " << where;
          }
          if (whole_chunks && detail::UsesRingForward(plan, detail::ForwardPath::kLean, single,
                                                      false, detail::RingPolicy::kEveryPlan)) {
            for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
              ASSERT_NE(detail::FindRingForwardKernel(dtype, plan, param_dtype, op), nullptr)
                  << "ring " << where;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(KernelDispatch, EveryBackwardPlanHasItsKernels) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t hidden : HiddenSizes()) {
      for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
        const KernelPlan plan = detail::PlanBackward(hidden, dtype, op);
        for (bool saved : {true, false}) {
          for (bool aligned : {true, false}) {
            ASSERT_NE(detail::FindBackwardKernel(dtype, plan, hidden, op, saved, aligned), nullptr)
                << Where(dtype, hidden, plan) << " op " << static_cast<int>(op) << " saved "
                << saved << " aligned " << aligned;
          }
        }
      }
    }
  }
}

// Which launches of more than a wave stage their parameters under each
// policy, at the shapes round 50 measured (BENCHMARKS.md): the default
// stages where it gained on the H100 (rows of four warps or more, blocks
// staging at most 32 KB of the op's parameters) and nowhere it lost.
TEST(KernelDispatch, MultiWaveLaunchesStageParametersWhereMeasured) {
  struct Shape {
    DType dtype;
    int64_t hidden;
    bool layer_norm_staged;
    bool rms_norm_staged;
  };
  const Shape shapes[] = {
      {DType::kBF16, 768, false, false},  {DType::kBF16, 1024, false, false},
      {DType::kBF16, 4096, true, true},   {DType::kBF16, 8192, true, true},
      {DType::kBF16, 16384, false, true}, {DType::kF32, 768, false, false},
      {DType::kF32, 1024, false, false},  {DType::kF32, 4096, true, true},
      {DType::kF32, 8192, false, true},
  };
  for (const Shape& shape : shapes) {
    const KernelPlan plan = detail::PlanForward(shape.hidden, shape.dtype);
    const std::string where = Where(shape.dtype, shape.hidden, plan);
    ASSERT_TRUE(detail::UsesParamStaging(plan, detail::ForwardPath::kLean, true, shape.dtype,
                                         shape.dtype, detail::ParamStaging::kMultiWarpRows))
        << where;
    EXPECT_EQ(detail::StagesMultiWaveLaunch(plan, NormOp::kLayerNorm,
                                            detail::ParamStaging::kMultiWarpRows),
              shape.layer_norm_staged)
        << "LayerNorm " << where;
    EXPECT_EQ(
        detail::StagesMultiWaveLaunch(plan, NormOp::kRmsNorm, detail::ParamStaging::kMultiWarpRows),
        shape.rms_norm_staged)
        << "RMSNorm " << where;
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      EXPECT_TRUE(detail::StagesMultiWaveLaunch(plan, op, detail::ParamStaging::kEveryLaunch))
          << where;
      EXPECT_FALSE(detail::StagesMultiWaveLaunch(plan, op, detail::ParamStaging::kOneWave))
          << where;
      EXPECT_FALSE(detail::StagesMultiWaveLaunch(plan, op, detail::ParamStaging::kOff)) << where;
    }
  }
  EXPECT_EQ(detail::GetParamStaging(), detail::ParamStaging::kMultiWarpRows) << "the default";
}

}  // namespace
}  // namespace normsvc::kernels::testing
