// The kernel instantiations, looked up by (x dtype, layout, slots). Each
// dtype's kernels live in their own translation unit (forward_<dtype>.cu,
// backward_<dtype>.cu) so they compile in parallel.
#pragma once

#include <cstddef>

#include "kernel_params.h"
#include "launch_plan.h"
#include "normsvc/kernels/types.h"
#include "param_staging.h"
#include "ring_policy.h"

namespace normsvc::kernels::detail {

using ForwardKernel = void (*)(ForwardParams);
using BackwardKernel = void (*)(BackwardParams);

// Which forward kernel family serves a segment. A function of the plan, the
// dtypes, the alignment of the segment's pointers and (for staged plans)
// whether it adds a residual only; every family gives the same bits for the
// same row.
enum class ForwardPath : uint8_t {
  // ForwardRowsKernel / ForwardStagedKernel / ForwardStreamedKernel: any
  // output dtype, any alignment (element-wise accesses where 16-byte ones are not allowed).
  kGeneral = 0,
  // ForwardLeanKernel (and its ring and parameter-staging variants): output
  // in the x dtype, and the vector layout with every row 16-byte aligned and
  // of whole chunks (`vectorized`; a plan with a partial last chunk never
  // is), or the strided layout. For staged plans ForwardStagedKernel<T,
  // true>: vectorized rows without a residual, gamma/beta in the x dtype.
  kLean = 1,
  // ForwardRealignKernel (forward_realign_kernel.cuh), or for segments
  // without a residual ForwardRealignStagedKernel (realign_policy.h,
  // forward_realign_staged_kernel.cuh): output in the x dtype, the vector layout within a block and
  // at most kRealignMaxSlots
  // slots, rows that share their offset from a 16-byte boundary across x,
  // out and the residuals, and 16-byte aligned gamma/beta (`realignable`);
  // hidden sizes that are not a multiple of the vector width included.
  kRealign = 2,
};

// `plain_inputs`: the segment adds no residual and has gamma/beta in the x
// dtype or none (what ForwardStagedKernel<T, true> reads; the other
// families take either).
inline ForwardPath ChooseForwardPath(const KernelPlan& plan, DType x_dtype, DType out_dtype,
                                     bool vectorized, bool realignable, bool plain_inputs) {
  if (out_dtype != x_dtype) return ForwardPath::kGeneral;
  // The strided layout's accesses are element-wise by construction.
  if (plan.layout == Layout::kStrided) return ForwardPath::kLean;
  if (plan.layout == Layout::kStaged) {
    return vectorized && plain_inputs ? ForwardPath::kLean : ForwardPath::kGeneral;
  }
  if (plan.layout != Layout::kVector) return ForwardPath::kGeneral;
  if (vectorized) return ForwardPath::kLean;
  // kRealignMaxSlots (launch_plan.h): 4-slot plans stay with the general
  // kernel, as before the realigning one existed.
  if (realignable && plan.cluster == 1 && plan.slots <= kRealignMaxSlots) {
    return ForwardPath::kRealign;
  }
  return ForwardPath::kGeneral;
}

// Launches of ForwardRealignKernel so far in this process (for tests that
// must know which kernel served a launch).
int64_t RealignForwardLaunches();

// Launches of ForwardStagedKernel so far in this process (the same use).
int64_t StagedForwardLaunches();

// Whether a one-segment launch of the specialized kernel's vector layout with
// four chunks a thread may take ForwardRingKernel instead (x staged through
// a shared-memory ring; same bits), as `policy` (ring_policy.h) says. The
// launcher takes it when the launch also has more row groups than fit on
// the device at once; the segment must have no residual.
inline bool UsesRingForward(const KernelPlan& plan, ForwardPath path, bool single_segment,
                            bool has_residual, RingPolicy policy) {
  const bool policy_allows = policy == RingPolicy::kEveryPlan ||
                             (policy == RingPolicy::kTwoBlockClusters && plan.cluster == 2);
  return policy_allows && path == ForwardPath::kLean && single_segment && !has_residual &&
         plan.layout == Layout::kVector && plan.slots == 4;
}

// Whether a one-segment launch of the specialized kernel may take the one
// that stages gamma/beta in shared memory (same bits): the vector layout
// within a block, gamma/beta in the x dtype (16-byte chunks), as `policy`
// allows. The launcher takes it for launches whose blocks all fit on the
// device at once (small batches), and for longer ones as
// StagesMultiWaveLaunch says.
inline bool UsesParamStaging(const KernelPlan& plan, ForwardPath path, bool single_segment,
                             DType x_dtype, DType param_dtype, ParamStaging policy) {
  return policy != ParamStaging::kOff && path == ForwardPath::kLean && single_segment &&
         plan.layout == Layout::kVector && plan.cluster == 1 && param_dtype == x_dtype;
}

// The plan of a parameter-staging launch whose rows are no more than the
// device's multiprocessors: rows of four warps or more get a block each
// (groups 1) instead of sharing one; the row's team, and so every bit of its
// result, is the plan's. Measured on the H200 with an experiment build that
// took one row a block for every bf16 H = 4096 launch (BENCHMARKS.md, round
// 11, step 6): 64 rows from a graph 3.09 -> 2.84 us, but large launches
// lost 0.18 of copy, hence only here.
inline KernelPlan WaveRowsPlan(const KernelPlan& plan) {
  if (plan.groups == 1 || plan.row_threads < 128) return plan;
  KernelPlan wave = plan;
  wave.groups = 1;
  wave.block_threads = plan.row_threads;
  return wave;
}

// Its dynamic shared memory: a 16-byte slot per thread, chunk and parameter.
inline std::size_t ParamStagingBytes(const KernelPlan& plan) {
  return std::size_t{2} * static_cast<std::size_t>(plan.slots) *
         static_cast<std::size_t>(plan.block_threads) * 16;
}

// The most bytes of parameters a block of a launch of more than a wave may
// stage (kMultiWarpRows).
inline constexpr std::size_t kMultiWaveStagingMaxBytes = 32 * 1024;

// Whether a launch of more than a wave that UsesParamStaging allows stages
// its parameters too (a block a row group, as the unstaged kernel has). Each
// block then copies the op's parameters once a row team (LayerNorm: gamma
// and beta, as many bytes as x's; RMSNorm: gamma), so that their first loads
// do not wait after the statistics. Measured on an H100 (BENCHMARKS.md,
// round 50): +0.004 to +0.019 of copy where a row spans four warps or more
// and a block stages at most kMultiWaveStagingMaxBytes (LayerNorm bf16 4096
// and 8192, fp32 4096; RMSNorm bf16 4096-16384, fp32 8192); a loss where a
// row is one or two warps (bf16 768: -0.08; several row teams of a block
// read the parameters once through L1 unstaged) or a block stages 64 KB
// (bf16 LayerNorm 16384: -0.03).
inline bool StagesMultiWaveLaunch(const KernelPlan& plan, NormOp op, ParamStaging policy) {
  if (policy == ParamStaging::kEveryLaunch) return true;
  const std::size_t params = op == NormOp::kLayerNorm ? 2 : 1;
  return policy == ParamStaging::kMultiWarpRows && plan.row_threads >= 128 &&
         ParamStagingBytes(plan) / 2 * params <= kMultiWaveStagingMaxBytes;
}

// Null when no instantiation matches the plan (a planning bug: the launcher
// reports kInternal). The kernel of `path` (ForwardPath::kLean and kRealign
// with gamma/beta in `param_dtype`).
ForwardKernel FindForwardKernel(DType x_dtype, const KernelPlan& plan, ForwardPath path,
                                DType param_dtype, bool single_segment);
// `hidden`, `op`, `saved_stats` (mean/rstd given) and `aligned`
// (BackwardParams::vectorized) pick among the staged backward kernels
// (UsesStagedBackward).
BackwardKernel FindBackwardKernel(DType x_dtype, const KernelPlan& plan, int64_t hidden, NormOp op,
                                  bool saved_stats, bool aligned);
// ForwardRealignStagedKernel for a realigning plan (`single`: one segment,
// else the segment table); null when none matches.
ForwardKernel FindRealignStagedForwardKernel(DType x_dtype, const KernelPlan& plan,
                                             DType param_dtype, bool single);
ForwardKernel FindRingForwardKernel(DType x_dtype, const KernelPlan& plan, DType param_dtype,
                                    NormOp op);
ForwardKernel FindParamStagedForwardKernel(DType x_dtype, const KernelPlan& plan);

ForwardKernel FindForwardKernelF32(const KernelPlan& plan);
ForwardKernel FindForwardKernelF16(const KernelPlan& plan);
ForwardKernel FindForwardKernelBF16(const KernelPlan& plan);
ForwardKernel FindLeanForwardKernelF32(const KernelPlan& plan, DType param_dtype, bool single);
ForwardKernel FindLeanForwardKernelF16(const KernelPlan& plan, DType param_dtype, bool single);
ForwardKernel FindLeanForwardKernelBF16(const KernelPlan& plan, DType param_dtype, bool single);
ForwardKernel FindRealignForwardKernelF32(const KernelPlan& plan, DType param_dtype, bool single);
ForwardKernel FindRealignForwardKernelF16(const KernelPlan& plan, DType param_dtype, bool single);
ForwardKernel FindRealignForwardKernelBF16(const KernelPlan& plan, DType param_dtype, bool single);
ForwardKernel FindRealignStagedForwardKernelF32(const KernelPlan& plan, DType param_dtype,
                                                bool single);
ForwardKernel FindRealignStagedForwardKernelF16(const KernelPlan& plan, DType param_dtype,
                                                bool single);
ForwardKernel FindRealignStagedForwardKernelBF16(const KernelPlan& plan, DType param_dtype,
                                                 bool single);
ForwardKernel FindRingForwardKernelF32(const KernelPlan& plan, DType param_dtype, NormOp op);
ForwardKernel FindRingForwardKernelF16(const KernelPlan& plan, DType param_dtype, NormOp op);
ForwardKernel FindRingForwardKernelBF16(const KernelPlan& plan, DType param_dtype, NormOp op);
ForwardKernel FindParamStagedForwardKernelF32(const KernelPlan& plan);
ForwardKernel FindParamStagedForwardKernelF16(const KernelPlan& plan);
ForwardKernel FindParamStagedForwardKernelBF16(const KernelPlan& plan);
BackwardKernel FindBackwardKernelF32(const KernelPlan& plan, int64_t hidden, NormOp op,
                                     bool saved_stats, bool aligned);
BackwardKernel FindBackwardKernelF16(const KernelPlan& plan, int64_t hidden, NormOp op,
                                     bool saved_stats, bool aligned);
BackwardKernel FindBackwardKernelBF16(const KernelPlan& plan, int64_t hidden, NormOp op,
                                      bool saved_stats, bool aligned);

// BackwardRealignKernel for a PlanBackwardRealign plan; null when none matches.
BackwardKernel FindRealignBackwardKernel(DType x_dtype, const KernelPlan& plan, NormOp op,
                                         bool saved_stats);
BackwardKernel FindRealignBackwardKernelF32(const KernelPlan& plan, NormOp op, bool saved_stats);
BackwardKernel FindRealignBackwardKernelF16(const KernelPlan& plan, NormOp op, bool saved_stats);
BackwardKernel FindRealignBackwardKernelBF16(const KernelPlan& plan, NormOp op, bool saved_stats);

// Whether backward launches whose rows BackwardRealignKernel can serve take
// it (the default) or the strided plan's kernel (for A/B runs: norm_bench
// --backward-realign off, and tests that compare the two). Process-wide.
bool BackwardRealignEnabled();
void SetBackwardRealignEnabled(bool enabled);

// Launches of BackwardRealignKernel so far in this process (for tests: proof
// that a case took it).
int64_t RealignBackwardLaunches();

}  // namespace normsvc::kernels::detail
