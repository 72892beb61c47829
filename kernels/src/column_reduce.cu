// The backward's column reduction (stage 2, column_reduce.h): the narrow
// kernels (one column a thread) and the wide one (four columns a thread) for
// long rows.
#include "column_reduce.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "grid_dependency.cuh"
#include "launch_common.h"
#include "launch_plan.h"

namespace normsvc::kernels::detail {
namespace {

constexpr int kReduceColumns = 32;

// The requested sums: blockIdx.y = 0 reduces partial[0] into out[0], 1 the
// second (dbeta after dgamma), when requested.
struct ColumnSums {
  const float* partial[2];
  float* out[2];
};

// The calling thread's column of the sum its block reduces (blockIdx.y:
// which of `sums`; blockIdx.x: which kReduceColumns columns).
struct ColumnOfThread {
  const float* partial;
  float* out;
  int64_t column;
};

__device__ __forceinline__ ColumnOfThread ThisColumn(const ColumnSums& sums) {
  return {sums.partial[blockIdx.y], sums.out[blockIdx.y],
          static_cast<int64_t>(blockIdx.x) * kReduceColumns + threadIdx.x};
}

// Partials once added are dead: nothing reads them again before the next
// backward launch overwrites them. Dropping their lines from the L2
// (discard.global.L2, sm_80 and later: the line becomes invalid without being
// written back) saves the DRAM writes of every dirty partial line still in
// the L2, units x H x 8 bytes at most. Each kernel calls this after the
// __syncthreads that follows its last read of the partials, from one thread
// for each 128-byte line of 32 columns (`first_column`, the line's first),
// for the units of its slice (threadIdx.y, + slices, ...). A line is dropped
// only when it is 128-byte aligned and lies whole in its unit's row: then
// only this block reads it (its slice's threads; in the wide kernel other
// slices' threads load the last unit's row too, as padding for their load
// batches, and add nothing from it), all before that barrier. The bits are
// the same: only dead bytes change.
__device__ __forceinline__ void DiscardSlicePartials(const float* partial, int64_t units,
                                                     int32_t hidden, int64_t first_column,
                                                     int slices) {
  if (first_column + kReduceColumns > hidden) return;
  for (int64_t u = threadIdx.y; u < units; u += slices) {
    const float* const line = partial + u * hidden + first_column;
    if (reinterpret_cast<uintptr_t>(line) % 128 == 0) {
      asm volatile("discard.global.L2 [%0], 128;" ::"l"(__cvta_generic_to_global(line)) : "memory");
    }
  }
}

// The narrow kernels: out[c] = sum over u of partial[u][c], u in
// increasing order within each of ColumnReduceSlices(units) interleaved slices
// (blockDim.y), then the slices in order. Launched early (programmatic
// dependent launch): each waits for the partials' kernel before reading them,
// and lets the next launch (a backward kernel waits likewise) be scheduled.
//
// Many units (ColumnReduceSlices = kColumnReduceMaxSlices, more than 124 units: the
// in-block and two-block-cluster plans): the earlier kernel, a compile-time
// 32 slices. A runtime slice count there measured 0.01-0.02 of copy slower
// on the H200 (BENCHMARKS.md, round 14).
__global__ void __launch_bounds__(kReduceColumns* kColumnReduceMaxSlices)
    ManyUnitsColumnReduceKernel(const __grid_constant__ ColumnSums sums, int64_t units,
                                int32_t hidden, bool discard) {
  __shared__ float slice_sums[kColumnReduceMaxSlices][kReduceColumns + 1];
  BeginDependentGrid();
  const ColumnOfThread mine = ThisColumn(sums);
  float total = 0.0f;
  if (mine.column < hidden) {
    // Unrolled so that several loads are in flight; the additions keep their order.
#pragma unroll 4
    for (int64_t u = threadIdx.y; u < units; u += kColumnReduceMaxSlices) {
      total += mine.partial[u * hidden + mine.column];
    }
  }
  slice_sums[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && mine.column < hidden) {
    float sum = slice_sums[0][threadIdx.x];
    for (int s = 1; s < kColumnReduceMaxSlices; ++s) sum += slice_sums[s][threadIdx.x];
    mine.out[mine.column] = sum;
  }
  if (discard && threadIdx.x == 0) {
    DiscardSlicePartials(mine.partial, units, hidden, mine.column, kColumnReduceMaxSlices);
  }
}

// Dynamic shared memory (unused) that a many-units reduction takes when its
// grid has no more blocks than the device has multiprocessors, so that none
// of them holds two of its blocks. Launched early, the reduction's blocks are
// scheduled first on the multiprocessors the row pass leaves free (7 of 132
// for bf16 LayerNorm 16384 x 1024: 125 blocks of 768 threads fill the
// register file of the others), two of 1,024 threads each, and then read
// their partials through those few; one each spreads them. Measured on the
// H200: +0.007 to +0.012 of copy at H = 768-1024 (bf16 LayerNorm 1024
// unchanged); given to every many-units grid, it cost a wave where a grid has
// more blocks than multiprocessors (-0.02 to -0.04 at H = 4096-16384), so
// those go without (BENCHMARKS.md, round 15).
constexpr std::size_t kOneBlockPerMultiprocessorBytes = 116 * 1024;

// Fewer units: fewer slices, so that a block's threads each add up to
// kColumnReduceUnitsPerThread units rather than one or none.
__global__ void __launch_bounds__(kReduceColumns* kColumnReduceMaxSlices)
    FewUnitsColumnReduceKernel(const __grid_constant__ ColumnSums sums, int64_t units,
                               int32_t hidden, bool discard) {
  __shared__ float slice_sums[kColumnReduceMaxSlices][kReduceColumns + 1];
  BeginDependentGrid();
  const ColumnOfThread mine = ThisColumn(sums);
  const int slices = static_cast<int>(blockDim.y);
  // This thread's units, y, y + slices, ...: loaded kColumnReduceUnitsPerThread at
  // a time into registers (all in flight; a runtime-count loop would leave a
  // remainder of dependent loads), then added in increasing order.
  float total = 0.0f;
  if (mine.column < hidden) {
    const int64_t step = static_cast<int64_t>(slices) * kColumnReduceUnitsPerThread;
    for (int64_t base = threadIdx.y; base < units; base += step) {
      float values[kColumnReduceUnitsPerThread];
#pragma unroll
      for (int i = 0; i < kColumnReduceUnitsPerThread; ++i) {
        const int64_t u = base + static_cast<int64_t>(i) * slices;
        values[i] = u < units ? mine.partial[u * hidden + mine.column] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kColumnReduceUnitsPerThread; ++i) {
        if (base + static_cast<int64_t>(i) * slices < units) total += values[i];
      }
    }
  }
  slice_sums[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && mine.column < hidden) {
    // Unrolled to the largest slice count, so that the reads are issued
    // together rather than one after each addition.
    float sum = slice_sums[0][threadIdx.x];
#pragma unroll
    for (int s = 1; s < kColumnReduceMaxSlices; ++s) {
      if (s < slices) sum += slice_sums[s][threadIdx.x];
    }
    mine.out[mine.column] = sum;
  }
  if (discard && threadIdx.x == 0) {
    DiscardSlicePartials(mine.partial, units, hidden, mine.column, slices);
  }
}

// The wide kernel (WideColumnReduction): thread (x, y) of block (b, which)
// adds columns 4 * (32 b + x) .. + 3 of sum `which`, slice y (blockDim.y =
// ColumnReduceSlices(units)), by 16-byte loads of kColumnReduceUnitsPerThread
// units at a time, each added in increasing unit order component by
// component: each column's additions are the narrow kernels'
// (column_reduce.h), so the bits are theirs. A quarter of the narrow
// kernels' threads: one wave of blocks where they need several.
constexpr int kWideColumnThreads = 32;  // of a block, 4 columns each

__device__ __forceinline__ void AddTo(float4& total, const float4& v) {
  total.x += v.x;
  total.y += v.y;
  total.z += v.z;
  total.w += v.w;
}

__global__ void __launch_bounds__(kWideColumnThreads* kColumnReduceMaxSlices)
    WideColumnReduceKernel(const __grid_constant__ ColumnSums sums, int64_t units, int32_t hidden,
                           bool discard) {
  __shared__ float4 slice_sums[kColumnReduceMaxSlices][kWideColumnThreads];
  BeginDependentGrid();
  const float* const partial = sums.partial[blockIdx.y];
  float* const out = sums.out[blockIdx.y];
  const int64_t column = (static_cast<int64_t>(blockIdx.x) * kWideColumnThreads + threadIdx.x) * 4;
  const bool in_row = column < hidden;  // hidden % 4 == 0: all four columns or none
  const int slices = static_cast<int>(blockDim.y);
  float4 total = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (in_row) {
    const int64_t step = static_cast<int64_t>(slices) * kColumnReduceUnitsPerThread;
    for (int64_t base = threadIdx.y; base < units; base += step) {
      float4 values[kColumnReduceUnitsPerThread];
#pragma unroll
      for (int k = 0; k < kColumnReduceUnitsPerThread; ++k) {
        // Every load is made (the last unit's where there is none): the loads
        // carry no condition, only the additions do.
        const int64_t u = min(base + static_cast<int64_t>(k) * slices, units - 1);
        values[k] = __ldg(reinterpret_cast<const float4*>(partial + u * hidden + column));
      }
#pragma unroll
      for (int k = 0; k < kColumnReduceUnitsPerThread; ++k) {
        if (base + static_cast<int64_t>(k) * slices < units) AddTo(total, values[k]);
      }
    }
  }
  slice_sums[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && in_row) {
    float4 sum = slice_sums[0][threadIdx.x];
#pragma unroll
    for (int s = 1; s < kColumnReduceMaxSlices; ++s) {
      if (s < slices) AddTo(sum, slice_sums[s][threadIdx.x]);
    }
    // dgamma / dbeta are the caller's: no alignment is assumed.
    out[column] = sum.x;
    out[column + 1] = sum.y;
    out[column + 2] = sum.z;
    out[column + 3] = sum.w;
  }
  // Eight threads' columns make a line.
  if (discard && threadIdx.x % (kReduceColumns / 4) == 0) {
    DiscardSlicePartials(partial, units, hidden, column, slices);
  }
}

std::atomic<ColumnReduceForm> column_reduce_form{ColumnReduceForm::kAuto};
std::atomic<int64_t> wide_column_reduction_launches{0};
std::atomic<bool> discard_partials{true};

// Whether a reduction of `hidden` columns drops its partials: the policy
// (launch_plan.h) unless the process-wide switch is off.
bool DiscardsPartialsOf(int64_t hidden) {
  return discard_partials.load(std::memory_order_relaxed) && DiscardsPartials(hidden);
}

// Whether a reduction of `hidden` columns takes the wide kernel. Its 16-byte
// loads need hidden % 4 == 0; the partial rows then start on 16-byte
// boundaries of the workspace, which LaunchBackward requires to be aligned.
bool TakesWideKernel(int64_t hidden) {
  const ColumnReduceForm form = column_reduce_form.load(std::memory_order_relaxed);
  if (form == ColumnReduceForm::kNarrow || hidden % 4 != 0) return false;
  return form == ColumnReduceForm::kWide || WideColumnReduction(hidden);
}

Status LaunchWideColumnReduction(const ColumnSums& sums, unsigned requested, int64_t units,
                                 int32_t hidden, cudaLaunchConfig_t config) {
  constexpr int64_t kColumnsPerBlock = 4 * kWideColumnThreads;
  config.gridDim =
      dim3(static_cast<unsigned>((hidden + kColumnsPerBlock - 1) / kColumnsPerBlock), requested);
  config.blockDim = dim3(kWideColumnThreads, static_cast<unsigned>(ColumnReduceSlices(units)));
  const Status launched = FromCuda("column reduction launch",
                                   cudaLaunchKernelEx(&config, WideColumnReduceKernel, sums, units,
                                                      hidden, DiscardsPartialsOf(hidden)));
  if (launched.ok()) wide_column_reduction_launches.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

}  // namespace

ColumnReduceForm GetColumnReduceForm() {
  return column_reduce_form.load(std::memory_order_relaxed);
}
void SetColumnReduceForm(ColumnReduceForm form) {
  column_reduce_form.store(form, std::memory_order_relaxed);
}
bool GetDiscardPartials() { return discard_partials.load(std::memory_order_relaxed); }
void SetDiscardPartials(bool discard) {
  discard_partials.store(discard, std::memory_order_relaxed);
}
int64_t WideColumnReductionLaunches() {
  return wide_column_reduction_launches.load(std::memory_order_relaxed);
}

Status LaunchColumnReduction(const BackwardArgs& args, const BackwardParams& params, int64_t units,
                             cudaStream_t stream) {
  ColumnSums sums = {};
  unsigned requested = 0;
  if (args.dgamma != nullptr) {
    sums.partial[requested] = params.dgamma_partial;
    sums.out[requested++] = args.dgamma;
  }
  if (args.dbeta != nullptr) {
    sums.partial[requested] = params.dbeta_partial;
    sums.out[requested++] = args.dbeta;
  }
  if (requested == 0) return Status::Ok();
  const int64_t h = args.hidden;
  cudaLaunchConfig_t config = {};
  config.gridDim =
      dim3(static_cast<unsigned>((h + kReduceColumns - 1) / kReduceColumns), requested);
  const int slices = ColumnReduceSlices(units);
  config.blockDim = dim3(kReduceColumns, static_cast<unsigned>(slices));
  config.stream = stream;
  cudaLaunchAttribute early = {};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &early;
  config.numAttrs = 1;
  if (TakesWideKernel(h)) {
    return LaunchWideColumnReduction(sums, requested, units, params.hidden, config);
  }
  const bool many_units = slices == kColumnReduceMaxSlices;
  const auto reduce = many_units ? ManyUnitsColumnReduceKernel : FewUnitsColumnReduceKernel;
  if (many_units) {
    const int64_t multiprocessors = MultiprocessorCount();
    const int64_t blocks = static_cast<int64_t>(config.gridDim.x) * config.gridDim.y;
    // ResidentBlocks raises the kernel's dynamic shared memory limit; a
    // device where the bytes do not give exactly one block a multiprocessor
    // (or a failed query: 0) launches without them. Scheduling only: the
    // bits are the same either way.
    if (multiprocessors > 0 && blocks <= multiprocessors &&
        ResidentBlocks(reinterpret_cast<const void*>(reduce),
                       static_cast<int>(config.blockDim.x * config.blockDim.y),
                       kOneBlockPerMultiprocessorBytes) == multiprocessors) {
      config.dynamicSmemBytes = kOneBlockPerMultiprocessorBytes;
    }
  }
  return FromCuda(
      "column reduction launch",
      cudaLaunchKernelEx(&config, reduce, sums, units, params.hidden, DiscardsPartialsOf(h)));
}

}  // namespace normsvc::kernels::detail
