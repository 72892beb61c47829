// Forward rows too long for registers, and rows of more than two register
// blocks, held in the shared memory of a cluster (Layout::kStaged,
// launch_plan.h): each element of x (and of the residual) is read from
// global memory once, where the streamed kernel reads a row three times.
//
// A cluster (the plan's blocks) takes one row at a time and loops
// over its rows (persistent). Chunk c of the row (W elements, 16 bytes of x)
// belongs to row thread c % row_threads, slot c / row_threads, as in the
// register layout; a thread keeps its slots in its own part of the block's
// shared memory (slot k at stage[k * blockDim.x + threadIdx.x]) and is the
// only thread that ever reads or writes them, so the stage needs no
// barriers. Rows of whole, 16-byte aligned chunks without a residual arrive
// by cp.async (every chunk of the thread in flight at once, no registers
// held); the others chunk by chunk through registers (the residual added,
// residual_out written, a partial last chunk's missing elements zero).
//
// The arithmetic is the register kernels' (forward_kernel.cuh): RMSNorm's
// squares in slot order and RowSum; LayerNorm's statistics by
// ClusterLayerNormStatistics; NormalizedValue and ApplyAffine per element.
// A row's bits depend only on its data, H and dtypes (the plan is a
// function of those).
#pragma once

#include <type_traits>

#include "async_copy.cuh"
#include "forward_kernel.cuh"

namespace normsvc::kernels::detail {

// Chunks a thread normalizes together at the end (their parameters' loads in flight together).
inline constexpr int kOutputChunksAStep = 2;

// The output of a row of whole, aligned chunks whose output and gamma/beta
// are in the x dtype: the op and the presence of gamma and beta are
// compile-time, so an element costs the arithmetic alone (the general loop
// in ForwardStagedKernel decides them, the dtypes and the chunk's length at
// run time). The same operations in the same order: the same bits.
template <typename T, int W, bool kLayerNorm, bool kGamma, bool kBeta>
__device__ __forceinline__ void WriteWholeChunks(const Pack<T, W>* stage, int block_threads,
                                                 int slots, const RowTeam& team, const T* gamma,
                                                 const T* beta, T* out, const RowStats& stats) {
  for (int k0 = 0; k0 < slots; k0 += kOutputChunksAStep) {
    float g[kOutputChunksAStep][W] = {};
    float b[kOutputChunksAStep][W] = {};
#pragma unroll
    for (int u = 0; u < kOutputChunksAStep; ++u) {
      const int k = k0 + u;
      if (k >= slots) continue;
      const int64_t index = static_cast<int64_t>(k * team.row_threads + team.rank) * W;
      if constexpr (kGamma) LoadParamsAs<T, W>(gamma + index, true, g[u]);
      if constexpr (kBeta) LoadParamsAs<T, W>(beta + index, true, b[u]);
    }
#pragma unroll
    for (int u = 0; u < kOutputChunksAStep; ++u) {
      const int k = k0 + u;
      if (k >= slots) continue;
      const int64_t index = static_cast<int64_t>(k * team.row_threads + team.rank) * W;
      const Pack<T, W> v = stage[k * block_threads];
      Pack<T, W> y;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        y.e[j] = FromFloat<T>(ApplyAffine(NormalizedValue(PackElement(v, j), stats, kLayerNorm),
                                          g[u][j], b[u][j], kGamma, kBeta));
      }
      StoreChunk<T, W>(out + index, y, true);
    }
  }
}

// 64 registers a thread: two blocks of kMaxBlockThreads a multiprocessor
// (staged plans of at most kStagedTwoBlockBytes a block), or one of
// kStagedWideBlockThreads.
//
// kLean: every row of the launch is of whole, 16-byte aligned chunks
// without a residual, its output and gamma/beta (if any) in the x dtype
// (ForwardPath::kLean for a staged plan, ChooseForwardPath): the other
// paths are compiled out, so the kernel keeps fewer values live at its
// register bound. The same operations in the same order: the same bits.
template <typename T, bool kLean>
__global__ void __launch_bounds__(kStagedWideBlockThreads, 1)
    ForwardStagedKernel(const __grid_constant__ ForwardParams p) {
  constexpr int W = static_cast<int>(16 / sizeof(T));
  BeginDependentGrid();
  __shared__ ReduceScratch scratch;
  BeginClusterExchanges(scratch);
  extern __shared__ __align__(128) uint8_t stage_bytes[];  // StagedForwardSmemBytes(plan)
  Pack<T, W>* const stage = reinterpret_cast<Pack<T, W>*>(stage_bytes) + threadIdx.x;
  const int block_threads = static_cast<int>(blockDim.x);
  const RowTeam team = MakeClusterTeam(p.shape);
  const RowSchedule schedule = MakeSchedule(p.shape, p.row_groups);
  for (int it = 0; it < schedule.iterations; ++it) {
    int64_t local_row = 0;
    const DeviceSegment& s = *LocateSegment(p, schedule.FirstRowOf(it), &local_row);
    const bool layer_norm = s.op == static_cast<uint8_t>(NormOp::kLayerNorm);
    const bool vectorized = s.vectorized != 0;
    const int chunks = (s.hidden + W - 1) / W;
    const int slots =
        team.rank < chunks ? (chunks - team.rank + team.row_threads - 1) / team.row_threads : 0;
    const RowPointers<T> r = ResolveRow<T>(s, local_row);
    const auto chunk_of = [&](int k) { return k * team.row_threads + team.rank; };

    if (kLean || (vectorized && r.residual == nullptr)) {
      for (int k = 0; k < slots; ++k) {
        CopyAsync16(stage + k * block_threads, r.x + static_cast<int64_t>(chunk_of(k)) * W);
      }
      CommitAsyncCopies();
      WaitAsyncCopies<0>();
    } else if constexpr (!kLean) {
#pragma unroll 2
      for (int k = 0; k < slots; ++k) {
        const int chunk = chunk_of(k);
        const int64_t index = static_cast<int64_t>(chunk) * W;
        const int elements = ChunkElements<W>(chunk, s.hidden);
        Pack<T, W> v = LoadPartialChunk<T, W>(r.x + index, vectorized, elements);
        if (r.residual != nullptr) {
          v = AddResidual(v, LoadPartialChunk<T, W>(r.residual + index, vectorized, elements));
          if (r.residual_out != nullptr) {
            StorePartialChunk<T, W>(r.residual_out + index, v, vectorized, elements);
          }
        }
        stage[k * block_threads] = v;
      }
    }

    // Missing elements of a partial last chunk are zeros: they add nothing
    // to the sums and RMSNorm's squares; the second pass skips them.
    const int first_slot = (it & 1) * 2;
    const float h = static_cast<float>(s.hidden);
    RowStats stats;
    if (layer_norm) {
      float sum = 0.0f;
      int count = 0;
      for (int k = 0; k < slots; ++k) {
        sum += PackSum<T, W>(stage[k * block_threads]);
        count += ChunkElements<W>(chunk_of(k), s.hidden);
      }
      const auto second_pass = [&](float pivot, float& d_sum, float& d_squares) {
        if (kLean || vectorized) {  // whole chunks: no element to skip
          for (int k = 0; k < slots; ++k) {
            const Pack<T, W> values = stage[k * block_threads];
#pragma unroll
            for (int j = 0; j < W; ++j) {
              const float d = __fsub_rn(PackElement(values, j), pivot);
              d_sum += d;
              d_squares = fmaf(d, d, d_squares);
            }
          }
          return;
        }
        if constexpr (!kLean) {
          for (int k = 0; k < slots; ++k) {
            const int elements = ChunkElements<W>(chunk_of(k), s.hidden);
            const Pack<T, W> values = stage[k * block_threads];
#pragma unroll
            for (int j = 0; j < W; ++j) {
              if (j >= elements) continue;
              const float d = __fsub_rn(PackElement(values, j), pivot);
              d_sum += d;
              d_squares = fmaf(d, d, d_squares);
            }
          }
        }
      };
      stats = ClusterLayerNormStatistics(sum, count, h, s.epsilon, team, scratch, first_slot,
                                         second_pass);
    } else {
      float squares[1] = {0.0f};
      for (int k = 0; k < slots; ++k) {
        const Pack<T, W> values = stage[k * block_threads];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float x = PackElement(values, j);
          squares[0] = fmaf(x, x, squares[0]);
        }
      }
      RowSum<1>(squares, team, scratch, first_slot + 1);
      stats.rstd = RstdFromVariance(squares[0] / h, s.epsilon);
    }

    // Two chunks a step, both chunks' gamma/beta loads issued before either
    // is used: the parameters come from the L2 (a row's are read by every
    // row), and one chunk at a time left a thread waiting on that latency
    // once a chunk.
    constexpr DType kX = DTypeOfElement<T>();
    const bool whole_chunks_as_x =
        vectorized && r.out_dtype == static_cast<uint8_t>(kX) &&
        ((r.gamma == nullptr && r.beta == nullptr) || r.param_dtype == static_cast<uint8_t>(kX));
    if (kLean || whole_chunks_as_x) {
      const T* gamma = static_cast<const T*>(r.gamma);
      const T* beta = static_cast<const T*>(r.beta);
      T* out = static_cast<T*>(r.out);
      const auto write = [&](auto layer_norm_c, auto gamma_c, auto beta_c) {
        WriteWholeChunks<T, W, decltype(layer_norm_c)::value, decltype(gamma_c)::value,
                         decltype(beta_c)::value>(stage, block_threads, slots, team, gamma, beta,
                                                  out, stats);
      };
      using Yes = std::true_type;
      using No = std::false_type;
      if (!layer_norm) {
        gamma != nullptr ? write(No{}, Yes{}, No{}) : write(No{}, No{}, No{});
      } else if (gamma != nullptr) {
        beta != nullptr ? write(Yes{}, Yes{}, Yes{}) : write(Yes{}, Yes{}, No{});
      } else {
        beta != nullptr ? write(Yes{}, No{}, Yes{}) : write(Yes{}, No{}, No{});
      }
    } else if constexpr (!kLean) {
      for (int k0 = 0; k0 < slots; k0 += kOutputChunksAStep) {
        float g[kOutputChunksAStep][W] = {};
        float b[kOutputChunksAStep][W] = {};
#pragma unroll
        for (int u = 0; u < kOutputChunksAStep; ++u) {
          const int k = k0 + u;
          if (k >= slots) continue;
          const int chunk = chunk_of(k);
          const int64_t index = static_cast<int64_t>(chunk) * W;
          const int elements = ChunkElements<W>(chunk, s.hidden);
          if (r.gamma != nullptr) {
            LoadParams<T, W>(r.gamma, r.param_dtype, index, vectorized, g[u], elements);
          }
          if (r.beta != nullptr) {
            LoadParams<T, W>(r.beta, r.param_dtype, index, vectorized, b[u], elements);
          }
        }
#pragma unroll
        for (int u = 0; u < kOutputChunksAStep; ++u) {
          const int k = k0 + u;
          if (k >= slots) continue;
          const int chunk = chunk_of(k);
          const Pack<T, W> v = stage[k * block_threads];
          float y[W];
#pragma unroll
          for (int j = 0; j < W; ++j) {
            y[j] = ApplyAffine(NormalizedValue(PackElement(v, j), stats, layer_norm), g[u][j],
                               b[u][j], r.gamma != nullptr, r.beta != nullptr);
          }
          StoreOutput<W>(r.out, r.out_dtype, static_cast<int64_t>(chunk) * W, y, vectorized,
                         ChunkElements<W>(chunk, s.hidden));
        }
      }
    }
    if (team.rank == 0) {
      if (s.mean != nullptr) s.mean[local_row] = stats.mean_hi + stats.mean_lo;
      if (s.rstd != nullptr) s.rstd[local_row] = stats.rstd;
    }
  }
  // No block of a cluster may exit while another may still access its shared memory.
  ClusterSync();
}

}  // namespace normsvc::kernels::detail
