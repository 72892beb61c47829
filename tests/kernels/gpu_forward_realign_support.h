// What the realigning forward's GPU tests share (gpu_forward_realign_test.cc,
// gpu_forward_realign_staged_test.cc): which cases a realigning kernel
// serves, and the realigning policy set for a scope.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpu_forward_case.h"
#include "kernel_registry.h"
#include "launch_plan.h"
#include "realign_policy.h"

namespace normsvc::kernels::testing {

// Whether the case's rows are not all whole, 16-byte aligned chunks (so the
// specialized kernel cannot serve it).
inline bool Misaligned(const ForwardSpec& spec) {
  const int64_t size = static_cast<int64_t>(DTypeSize(spec.x_dtype));
  const int64_t width = 16 / size;
  const bool misaligned_pitch = spec.rows > 1 && ((spec.hidden + spec.x_pad) * size % 16 != 0 ||
                                                  (spec.hidden + spec.out_pad) * size % 16 != 0);
  return spec.hidden % width != 0 || spec.offset * size % 16 != 0 || misaligned_pitch;
}

// Whether the realigning kernel serves a misaligned case whose rows share
// their offsets (vector plans of more than kRealignMaxSlots slots go to the
// general kernel, strided plans to the specialized one).
inline bool RealignServes(const ForwardSpec& spec) {
  const detail::KernelPlan plan = detail::PlanForward(spec.hidden, spec.x_dtype);
  return detail::ChooseForwardPath(plan, spec.x_dtype, spec.out_dtype, false, true, true) ==
         detail::ForwardPath::kRealign;
}

// Sets the realigning policy for its scope, then restores the one before.
class ScopedRealignPolicy {
 public:
  explicit ScopedRealignPolicy(detail::RealignPolicy policy)
      : previous_(detail::GetRealignPolicy()) {
    detail::SetRealignPolicy(policy);
  }
  ~ScopedRealignPolicy() { detail::SetRealignPolicy(previous_); }
  ScopedRealignPolicy(const ScopedRealignPolicy&) = delete;
  ScopedRealignPolicy& operator=(const ScopedRealignPolicy&) = delete;

 private:
  const detail::RealignPolicy previous_;
};

// A misaligned case of the `variant`th combination: the op, fp32 parameters
// of 16-bit rows, the row offset (0..8 elements; an odd one for rows of
// whole chunks, which need it to be misaligned), padded pitches and the
// affine parameters all cycle with `variant`. Residual and statistics are
// the caller's.
inline ForwardSpec VariedRealignSpec(int variant, DType dtype, int64_t hidden, int64_t rows) {
  ForwardSpec spec;
  spec.op = variant % 2 ? NormOp::kLayerNorm : NormOp::kRmsNorm;
  spec.x_dtype = spec.out_dtype = dtype;
  spec.param_dtype = dtype != DType::kF32 && variant % 3 == 0 ? DType::kF32 : dtype;
  spec.rows = rows;
  spec.hidden = hidden;
  spec.offset = hidden % (16 / static_cast<int64_t>(DTypeSize(dtype))) == 0 ? 1 + 2 * (variant % 4)
                                                                            : variant % 9;
  spec.x_pad = spec.out_pad = variant % 4;
  spec.gamma = variant % 4 != 3;
  spec.beta = variant % 5 != 4;
  return spec;
}

// Shapes of many rows (more row groups than a wave of blocks holds, so
// every block loops over several: at least three times on an H100 or H200
// at full size, so that the staged kernel reuses each stage), the
// benchmark's H among them, rows of a few threads (bf16 33) and of one warp
// (bf16 300), and the case of one: rows 3 elements past a 16-byte boundary,
// statistics saved.
struct ManyRowShape {
  int64_t hidden, rows;
  DType dtype;
};
inline constexpr ManyRowShape kManyRowShapes[] = {{33, 200000, DType::kBF16},
                                                  {300, 30000, DType::kBF16},
                                                  {2049, 9000, DType::kBF16},
                                                  {2049, 9000, DType::kF32},
                                                  {8191, 1500, DType::kF16}};

inline ForwardSpec ManyRowSpec(const ManyRowShape& shape, NormOp op) {
  ForwardSpec spec;
  spec.op = op;
  spec.x_dtype = spec.out_dtype = spec.param_dtype = shape.dtype;
  spec.rows = std::min(shape.rows, MaxCaseElements() / shape.hidden + 2);
  spec.hidden = shape.hidden;
  spec.offset = 3;
  spec.stats = true;
  return spec;
}

}  // namespace normsvc::kernels::testing
