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

#include "async_copy.cuh"
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
// taken round-robin by the block's row groups, the next rows' words loading
// while the current one is computed. K words a thread, W elements a word.
template <typename T, int K, bool kLayerNorm, bool kSavedStats>
__global__ void __maxnreg__(K == 1 ? kRealignBackwardRegistersOneSlot
                                   : kRealignBackwardRegistersTwoSlots)
    BackwardRealignKernel(const __grid_constant__ BackwardParams p) {
  constexpr int W = static_cast<int>(16 / sizeof(T));
  BeginDependentGrid();  // as BackwardStagedKernel
  __shared__ RealignScratch scratch;
  // gamma, dgamma and dbeta words (ThreadWords), the ring of rows in
  // flight (RealignRing), then [groups][hidden] floats when groups > 1: the
  // groups' partials, added in order (RealignBackwardSmemBytes).
  extern __shared__ __align__(16) float dynamic_smem[];
  using Words = ThreadWords<K, W>;
  const int threads = static_cast<int>(blockDim.x);
  const int64_t words_floats = Words::Floats(threads);
  const Words gamma_words{reinterpret_cast<float4*>(dynamic_smem)};
  const Words dgamma_words{reinterpret_cast<float4*>(dynamic_smem + words_floats)};
  const Words dbeta_words{reinterpret_cast<float4*>(dynamic_smem + 2 * words_floats)};
  const RealignRing<K> ring{reinterpret_cast<uint4*>(dynamic_smem + 3 * words_floats), threads};
  float* const combine = dynamic_smem + 3 * words_floats +
                         (RealignUsesRing(K, W) ? RealignRing<K>::Floats(threads) : 0);
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
  // Rows in flight (RealignUsesRing): kRealignStages - 1 rows ahead of the
  // one computed, each thread's words copied by cp.async into its own slots
  // of the ring (no registers held, no barrier: a thread reads back only
  // what it copied). In registers, one row ahead was all that fit, and a row
  // took less time than its loads under this traffic (round 21 in
  // kernels/BENCHMARKS.md). 16-bit rows of two words a thread measured
  // slower with the ring, and keep the next row in registers as raw 32-bit
  // lanes (LoadRawWord), two buffers, the loop unrolled by two so that
  // which one a row is read into is known at compile time. A word is read
  // whole whenever it lies within the tensor, a row's end words too (their
  // elements outside the row are cleared when read); only the tensor's first
  // and last words are loaded element by element.
  constexpr bool kRing = RealignUsesRing(K, W);
  uint4 next_x[2][K];
  uint4 next_dy[2][K];
  float next_mean[2] = {0.0f, 0.0f};
  float next_rstd[2] = {0.0f, 0.0f};
  const int64_t last_row = p.rows - 1;
  auto word_in_tensor = [&](int64_t stride, int64_t row, int word) {
    const int64_t first = row * stride - shift + static_cast<int64_t>(word) * W;
    return first >= 0 && first + W <= last_row * stride + hidden;
  };
  const int warp_in_block = static_cast<int>(threadIdx.x) >> 5;
  const bool warp_leader = (threadIdx.x & 31) == 0;
  // Iteration `it`'s row of this thread's group; inactive past the unit's
  // end (a padding row of the last iteration).
  struct UnitRow {
    bool active;
    int64_t row;
  };
  auto unit_row = [&](int it) {
    const int64_t index = begin + static_cast<int64_t>(it) * groups + team.group;
    return UnitRow{index < end, row_class + index * period};
  };
  // Registers: row `it` into buffer `b`.
  auto fetch_to_registers = [&](int it, auto buffer) {
    constexpr int b = decltype(buffer)::value;
    const UnitRow at = unit_row(it);
    const bool active = at.active;
    const int64_t row = at.row;
    const T* x_words = row_words(p.x, p.x_stride, row);
    const T* dy_words = row_words(p.dy, p.dy_stride, row);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int word = k * team.row_threads + team.rank;
      // A padding row (past the unit's end) reads nothing: an empty span.
      const WordSpan row_span = active ? span[k] : WordSpan{0, 0};
      const bool in_row = row_span.hi > row_span.lo;
      next_x[b][k] = LoadRawWord<T, W>(x_words + word * W, row_span,
                                       in_row && word_in_tensor(p.x_stride, row, word));
      next_dy[b][k] = LoadRawWord<T, W>(dy_words + word * W, row_span,
                                        in_row && word_in_tensor(p.dy_stride, row, word));
    }
    if constexpr (kSavedStats) {
      if (active) {
        next_rstd[b] = p.rstd[row];
        if constexpr (kLayerNorm) next_mean[b] = p.mean[row];
      }
    }
  };
  // The ring: row `it` into stage `stage`.
  auto fetch = [&](int it, int stage) {
    const UnitRow at = unit_row(it);
    if (at.active) {
      const int64_t row = at.row;
      const T* x_words = row_words(p.x, p.x_stride, row);
      const T* dy_words = row_words(p.dy, p.dy_stride, row);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (span[k].hi <= span[k].lo) continue;
        const int word = k * team.row_threads + team.rank;
        auto copy = [&](const T* words, int64_t stride, uint4* slot) {
          if (word_in_tensor(stride, row, word)) {
            CopyAsync16(slot, words + word * W);
          } else {
            const Pack<T, W> pack = LoadWord<T, W>(words + word * W, span[k]);
            *slot = reinterpret_cast<const uint4&>(pack);
          }
        };
        copy(x_words, p.x_stride, ring.Slot(stage, 0, k));
        copy(dy_words, p.dy_stride, ring.Slot(stage, 1, k));
      }
      if constexpr (kSavedStats) {
        // One copy a warp; its lanes read it after the leader's wait and a
        // warp barrier. The copy may overwrite what they read a row ago
        // because RealignRowSum's block barrier lies between: rows of two
        // or more warps (every plan: launch_plan_test checks it).
        if (warp_leader) {
          float2* const own = ring.Stats(stage, warp_in_block);
          CopyAsync4(&own->y, p.rstd + row);
          if constexpr (kLayerNorm) CopyAsync4(&own->x, p.mean + row);
        }
      }
    }
    CommitAsyncCopies();  // possibly empty: one group a row keeps the count
  };

  // Row `it` of the unit from ring stage `where` (an int), after asking for
  // row it + kRealignStages - 1 into the stage row it - 1 has left; or from
  // register buffer `where` (std::integral_constant), after asking for row
  // it + 1 into the other.
  constexpr int kAhead = kRealignStages - 1;
  auto row_step = [&](int it, auto where) {
    [[maybe_unused]] int stage = 0;  // the ring's; unused by the register buffers
    if constexpr (kRing) {
      stage = where;
      fetch(it + kAhead, stage == 0 ? kAhead : stage - 1);  // past the unit: an empty group
      WaitAsyncCopies<kAhead>();
      if constexpr (kSavedStats) __syncwarp();
    } else if (it + 1 < iterations) {
      fetch_to_registers(it + 1, std::integral_constant<int, 1 - decltype(where)::value>{});
    }
    const UnitRow at = unit_row(it);
    const bool active = at.active;
    const int64_t row = at.row;
    const int slot = (it & 1) * 3;
    // The row's words, with the elements outside the row cleared: the code
    // below relies on zeros there (x, dy and gamma). A padding row (past
    // the unit's end) is zeros.
    Pack<T, W> x[K];
    Pack<T, W> dy[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      uint4 x_raw = make_uint4(0u, 0u, 0u, 0u);
      uint4 dy_raw = x_raw;
      if (active && span[k].hi > span[k].lo) {
        if constexpr (kRing) {
          x_raw = *ring.Slot(stage, 0, k);
          dy_raw = *ring.Slot(stage, 1, k);
        } else {
          x_raw = next_x[decltype(where)::value][k];
          dy_raw = next_dy[decltype(where)::value][k];
        }
        if (!span[k].Whole(W)) {
          x_raw = RowElementsOnly<T, W>(x_raw, span[k]);
          dy_raw = RowElementsOnly<T, W>(dy_raw, span[k]);
        }
      }
      x[k] = reinterpret_cast<const Pack<T, W>&>(x_raw);
      dy[k] = reinterpret_cast<const Pack<T, W>&>(dy_raw);
    }
    RowStats stats;
    if constexpr (kSavedStats && kRing) {
      const float2 saved = active ? *ring.Stats(stage, warp_in_block) : make_float2(0.0f, 0.0f);
      stats.mean_hi = kLayerNorm ? saved.x : 0.0f;
      stats.rstd = saved.y;
    } else if constexpr (kSavedStats) {
      stats.mean_hi = next_mean[decltype(where)::value];
      stats.rstd = next_rstd[decltype(where)::value];
    }

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
  if constexpr (kRing) {
#pragma unroll
    for (int stage = 0; stage < kAhead; ++stage) fetch(stage, stage);
    for (int it = 0, stage = 0; it < iterations; ++it, stage = stage == kAhead ? 0 : stage + 1) {
      row_step(it, stage);
    }
    WaitAsyncCopies<0>();  // only empty groups can be pending
  } else {
    if (iterations > 0) fetch_to_registers(0, std::integral_constant<int, 0>{});
    for (int it = 0; it < iterations; it += 2) {
      row_step(it, std::integral_constant<int, 0>{});
      if (it + 1 < iterations) row_step(it + 1, std::integral_constant<int, 1>{});
    }
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
