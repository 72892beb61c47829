// BackwardRealignKernel: the backward of rows whose hidden size is not a
// multiple of the vector width, moved as the aligned 16-byte words they lie
// across. launch_plan.h (PlanBackwardRealign) has the layout, the units of
// one offset class, and what the result bits depend on; backward_kernel.cuh
// has the arithmetic, which is the same per element:
//   xhat = (x - mean) * rstd, g = dy * gamma,
//   dx = rstd * ((g - sum(g)/H) - xhat * sum(g*xhat)/H)   (RMSNorm: no sum(g))
// with dy * xhat and dy accumulated per column over the unit's rows and
// written as the unit's row of partials (stage 2 as every backward).
#pragma once

#include <type_traits>

#include "device_access.cuh"
#include "grid_dependency.cuh"
#include "kernel_params.h"
#include "launch_plan.h"
#include "realign_words.cuh"
#include "row_reduce.cuh"

namespace normsvc::kernels::detail {

// A row's team: row_threads (whole warps, at most a block) threads of a
// block of `groups` rows.
struct RealignTeam {
  int row_threads;
  int rank;
  int group;
  int warps;
};

__device__ __forceinline__ RealignTeam MakeRealignTeam(int row_threads) {
  RealignTeam team;
  team.row_threads = row_threads;
  team.group = static_cast<int>(threadIdx.x) / row_threads;
  team.rank = static_cast<int>(threadIdx.x) - team.group * row_threads;
  team.warps = row_threads >> 5;
  return team;
}

// Warp totals of RealignRowSum: six slots (a row loop alternates between two
// sets of three) of each warp's N <= 2 values.
struct RealignScratch {
  float warp[6][kMaxBlockThreads / 32][2];
};

// The sums of N values over the row's team, the same bits in every thread:
// butterfly within each warp, then lane w of every warp of the row takes
// warp w's total (zero past the row's warps, at most 16) and the warp's 32
// lanes add them by butterfly (xor), which gives every lane the same bits. Contract as
// RowSum's: every thread of the row calls it with the same slot; a slot is
// rewritten only after a later call's barrier.
template <int N>
__device__ __forceinline__ void RealignRowSum(float (&v)[N], const RealignTeam& team,
                                              RealignScratch& scratch, int slot) {
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
  }
  if (team.warps == 1) return;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch.warp[slot][warp][i] = v[i];
  }
  if (team.row_threads == static_cast<int>(blockDim.x)) {
    __syncthreads();
  } else {
    // The row's own named barrier (1 + group; 0 is __syncthreads').
    asm volatile("bar.sync %0, %1;" ::"r"(1 + team.group), "r"(team.row_threads) : "memory");
  }
  const int first = team.group * team.warps;
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = lane < team.warps ? scratch.warp[slot][first + lane][i] : 0.0f;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
  }
}

template <typename T>
__device__ __forceinline__ float GammaAt(const BackwardParams& p, int64_t index) {
  if (p.gamma == nullptr) return 1.0f;
  if (static_cast<DType>(p.param_dtype) == DType::kF32) {
    return __ldg(static_cast<const float*>(p.gamma) + index);
  }
  return ToFloat(static_cast<const T*>(p.gamma)[index]);
}

// One unit: the rows row_class + i * period, i in [begin, end) of its class,
// taken round-robin by the block's row groups, the next row's words loaded
// while the current one is computed. K words a thread, W elements a word.
template <typename T, int K, bool kLayerNorm, bool kSavedStats>
__global__ void __maxnreg__(K == 1 ? kRealignBackwardRegistersOneSlot
                                   : kRealignBackwardRegistersTwoSlots)
    BackwardRealignKernel(const __grid_constant__ BackwardParams p) {
  constexpr int W = static_cast<int>(16 / sizeof(T));
  BeginDependentGrid();  // as BackwardStagedKernel
  __shared__ RealignScratch scratch;
  // gamma, dgamma and dbeta words (ThreadWords), then [groups][hidden]
  // floats when groups > 1: the groups' partials, added in order.
  extern __shared__ __align__(16) float dynamic_smem[];
  using Words = ThreadWords<K, W>;
  const int64_t words_floats = Words::Floats(static_cast<int>(blockDim.x));
  const Words gamma_words{reinterpret_cast<float4*>(dynamic_smem)};
  const Words dgamma_words{reinterpret_cast<float4*>(dynamic_smem + words_floats)};
  const Words dbeta_words{reinterpret_cast<float4*>(dynamic_smem + 2 * words_floats)};
  float* const combine = dynamic_smem + 3 * words_floats;
  const bool want_dgamma = p.dgamma_partial != nullptr;
  const bool want_dbeta = p.dbeta_partial != nullptr;
  const RealignTeam team = MakeRealignTeam(p.shape.row_threads);
  const int hidden = p.hidden;
  const float h = static_cast<float>(hidden);
  // Means as products with 1/H (one rounding more than a division, and far
  // fewer instructions: the backward's bits need only be reproducible).
  const float inv_h = 1.0f / h;
  const int groups = p.shape.groups;
  const int64_t unit = blockIdx.x;
  const int64_t row_class = unit / p.units_per_class;
  const int64_t begin = (unit - row_class * p.units_per_class) * p.rows_per_unit;
  const int64_t period = p.realign_period;
  const int64_t class_rows = row_class < p.rows ? (p.rows - row_class + period - 1) / period : 0;
  const int64_t end = min(class_rows, begin + p.rows_per_unit);
  const int iterations = end > begin ? static_cast<int>((end - begin + groups - 1) / groups) : 0;
  // Every row of the unit starts `shift` elements past a 16-byte boundary.
  const int shift = static_cast<int>(
      (p.realign_first_shift + row_class * static_cast<int64_t>(p.realign_shift_step)) % W);

  WordSpan span[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int first = (k * team.row_threads + team.rank) * W - shift;  // element of j = 0
    span[k].lo = min(W, max(0, -first));
    span[k].hi = max(span[k].lo, min(W, hidden - first));
  }
  auto column = [&](int k, int j) { return (k * team.row_threads + team.rank) * W - shift + j; };

  {
    float zeros[W];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float gamma[W];
#pragma unroll
      for (int j = 0; j < W; ++j) {
        gamma[j] = span[k].Holds(j) ? GammaAt<T>(p, column(k, j)) : 0.0f;
        zeros[j] = 0.0f;
      }
      gamma_words.Store(k, gamma);
      dgamma_words.Store(k, zeros);
      dbeta_words.Store(k, zeros);
    }
  }

  // The aligned word of element 0's word of `row` in `base` (x, dy or dx).
  auto row_words = [&](const void* base, int64_t stride, int64_t row) {
    return static_cast<const T*>(base) + row * stride - shift;
  };
  // Rows in flight: the one being computed and the next, in two register
  // buffers (which one a row is read into is fixed at compile time by
  // unrolling the loop by two: a register copy of a buffer would wait for
  // its loads). Two rows ahead was tried and dropped (BENCHMARKS.md, round 20).
  // 16-bit words travel as raw lanes (LoadRawWord: as Packs of 16-bit
  // elements the loads were waited for at once); fp32 words as Packs, whose
  // 32-bit elements need no permutes: raw lanes there cost fp32's two-word
  // kernels spills and 0.14 of copy (round 21).
  constexpr bool kRawWords = sizeof(T) == 2;
  using RingWord = std::conditional_t<kRawWords, uint4, Pack<T, W>>;
  RingWord ring_x[2][K];
  RingWord ring_dy[2][K];
  float ring_mean[2] = {0.0f, 0.0f};
  float ring_rstd[2] = {0.0f, 0.0f};
  // Whether the aligned word `word` of `row` lies wholly within the
  // tensor's rows (element offsets from `base`, as row_words takes them).
  const int64_t last_row = p.rows - 1;
  auto word_in_tensor = [&](int64_t stride, int64_t row, int word) {
    const int64_t begin = row * stride - shift + static_cast<int64_t>(word) * W;
    return begin >= 0 && begin + W <= last_row * stride + hidden;
  };
  auto fetch = [&](int it, auto buffer) {
    constexpr int b = decltype(buffer)::value;
    const int64_t index = begin + static_cast<int64_t>(it) * groups + team.group;
    const bool active = index < end;
    const int64_t row = row_class + index * period;
    const T* x_words = row_words(p.x, p.x_stride, row);
    const T* dy_words = row_words(p.dy, p.dy_stride, row);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int word = k * team.row_threads + team.rank;
      if constexpr (kRawWords) {
        // A padding row (past the unit's end) reads nothing: an empty span.
        const WordSpan row_span = active ? span[k] : WordSpan{0, 0};
        const bool in_row = row_span.hi > row_span.lo;
        ring_x[b][k] = LoadRawWord<T, W>(x_words + word * W, row_span,
                                         in_row && word_in_tensor(p.x_stride, row, word));
        ring_dy[b][k] = LoadRawWord<T, W>(dy_words + word * W, row_span,
                                          in_row && word_in_tensor(p.dy_stride, row, word));
      } else if (active) {
        ring_x[b][k] = LoadWord<T, W>(x_words + word * W, span[k]);
        ring_dy[b][k] = LoadWord<T, W>(dy_words + word * W, span[k]);
      } else {
        ZeroPack(ring_x[b][k]);
        ZeroPack(ring_dy[b][k]);
      }
    }
    if constexpr (kSavedStats) {
      if (active) {
        ring_rstd[b] = p.rstd[row];
        if constexpr (kLayerNorm) ring_mean[b] = p.mean[row];
      }
    }
  };

  // Row `it` of the unit from buffer `buffer` (it % 2), after asking for
  // row it + 1 into the buffer row it - 1 has left.
  auto row_step = [&](int it, auto buffer) {
    constexpr int b = decltype(buffer)::value;
    if (it + 1 < iterations) fetch(it + 1, std::integral_constant<int, 1 - b>{});
    const int64_t index = begin + static_cast<int64_t>(it) * groups + team.group;
    const bool active = index < end;
    const int64_t row = row_class + index * period;
    const int slot = (it & 1) * 3;
    // The row's words, with the elements outside the row cleared: the code
    // below relies on zeros there (x, dy and gamma).
    Pack<T, W> x[K];
    Pack<T, W> dy[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if constexpr (kRawWords) {
        uint4 x_raw = ring_x[b][k];
        uint4 dy_raw = ring_dy[b][k];
        if (!span[k].Whole(W)) {
          x_raw = RowElementsOnly<T, W>(x_raw, span[k]);
          dy_raw = RowElementsOnly<T, W>(dy_raw, span[k]);
        }
        x[k] = reinterpret_cast<const Pack<T, W>&>(x_raw);
        dy[k] = reinterpret_cast<const Pack<T, W>&>(dy_raw);
      } else {
        x[k] = ring_x[b][k];  // LoadWord left zeros outside the row
        dy[k] = ring_dy[b][k];
      }
    }
    RowStats stats;
    stats.mean_hi = ring_mean[b];
    stats.rstd = ring_rstd[b];

    if constexpr (!kSavedStats) {
      // Elements outside the row are zeros in x: they add nothing to the
      // first pass nor to RMSNorm's squares; LayerNorm's second pass skips them.
      if constexpr (kLayerNorm) {
        float sum[1] = {0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int j = 0; j < W; ++j) sum[0] += PackElement(x[k], j);
        }
        RealignRowSum<1>(sum, team, scratch, slot);
        stats.mean_hi = sum[0] * inv_h;
        float moments[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float d = span[k].Holds(j) ? PackElement(x[k], j) - stats.mean_hi : 0.0f;
            moments[0] += d;
            moments[1] = fmaf(d, d, moments[1]);
          }
        }
        RealignRowSum<2>(moments, team, scratch, slot + 1);
        stats.mean_lo = moments[0] * inv_h;
        stats.rstd = RstdFromVariance(LayerNormVariance(moments[1], stats.mean_lo, h), p.epsilon);
      } else {
        float squares[1] = {0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float v = PackElement(x[k], j);
            squares[0] = fmaf(v, v, squares[0]);
          }
        }
        RealignRowSum<1>(squares, team, scratch, slot + 1);
        stats.rstd = RstdFromVariance(squares[0] * inv_h, p.epsilon);
      }
    }

    // xhat of element j of word k; zero outside the row (where x, dy and
    // gamma are zeros), so that a non-finite statistic does not reach the
    // sums through them.
    auto xhat_of = [&](int k, int j, auto whole) {
      const float xhat = ((PackElement(x[k], j) - stats.mean_hi) - stats.mean_lo) * stats.rstd;
      return InRow<decltype(whole)::value, W>(span[k], j) ? xhat : 0.0f;
    };
    float sums[2] = {0.0f, 0.0f};  // sum(g), sum(g * xhat)
    auto add_sums = [&](int k, auto whole) {
      float gamma[W];
      gamma_words.Load(k, gamma);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float xhat = xhat_of(k, j, whole);
        const float g = PackElement(dy[k], j) * gamma[j];
        sums[0] += g;
        sums[1] = fmaf(g, xhat, sums[1]);
      }
    };
    ForEachWordInRow<K, W>(span, add_sums);
    RealignRowSum<2>(sums, team, scratch, slot + 2);
    const float mean_g = kLayerNorm ? sums[0] * inv_h : 0.0f;
    const float mean_gx = sums[1] * inv_h;
    if (active) {
      T* dx_words = const_cast<T*>(row_words(p.dx, p.dx_stride, row));
      auto write = [&](int k, auto whole) {
        float gamma[W];
        gamma_words.Load(k, gamma);
        Pack<T, W> dx;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float g = PackElement(dy[k], j) * gamma[j];
          dx.e[j] = FromFloat<T>(fmaf(-xhat_of(k, j, whole), mean_gx, g - mean_g) * stats.rstd);
        }
        StoreWord<T, W>(dx_words + (k * team.row_threads + team.rank) * W, dx, span[k]);
        if (want_dgamma) {
          float dgamma[W];
          dgamma_words.Load(k, dgamma);
#pragma unroll
          for (int j = 0; j < W; ++j) {
            dgamma[j] = fmaf(PackElement(dy[k], j), xhat_of(k, j, whole), dgamma[j]);
          }
          dgamma_words.Store(k, dgamma);
        }
        if (want_dbeta) {
          float dbeta[W];
          dbeta_words.Load(k, dbeta);
#pragma unroll
          for (int j = 0; j < W; ++j) dbeta[j] += PackElement(dy[k], j);
          dbeta_words.Store(k, dbeta);
        }
      };
      ForEachWordInRow<K, W>(span, write);
    }
  };
  if (iterations > 0) fetch(0, std::integral_constant<int, 0>{});
  for (int it = 0; it < iterations; it += 2) {
    row_step(it, std::integral_constant<int, 0>{});
    if (it + 1 < iterations) row_step(it + 1, std::integral_constant<int, 1>{});
  }

  // The unit's row of partials, in row columns: element j of word k is
  // column(k, j). Several groups: added in shared memory in group order.
  float* const partials[2] = {p.dgamma_partial, p.dbeta_partial};
  const int64_t partial_row = unit * static_cast<int64_t>(hidden);
  // Writes this thread's columns of `words` into the row at `row`.
  auto store_columns = [&](const Words& words, float* row) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float sums[W];
      words.Load(k, sums);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if (span[k].Holds(j)) row[column(k, j)] = sums[j];
      }
    }
  };
#pragma unroll
  for (int which = 0; which < 2; ++which) {
    if (partials[which] == nullptr) continue;
    const Words& words = which == 0 ? dgamma_words : dbeta_words;
    if (groups == 1) {
      store_columns(words, partials[which] + partial_row);
      continue;
    }
    __syncthreads();  // the previous users of `combine` are done
    store_columns(words, combine + team.group * hidden);
    __syncthreads();
    for (int c = static_cast<int>(threadIdx.x); c < hidden; c += static_cast<int>(blockDim.x)) {
      float total = combine[c];
      for (int g = 1; g < groups; ++g) total += combine[g * hidden + c];
      partials[which][partial_row + c] = total;
    }
  }
}

}  // namespace normsvc::kernels::detail
