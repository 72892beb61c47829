// Forward kernel for long runs of rows in the vector layout: x staged
// through a ring of shared memory by asynchronous 16-byte copies.
//
// Covers what ForwardLeanKernel covers with four chunks a thread (16-byte
// accesses allowed, output in the x dtype), for one segment without a
// residual, when the launch has more row groups than fit on the device at
// once (every block then loops over several row groups), and RingPolicy
// (ring_policy.h) allows it: by default only for rows that span a cluster
// of two blocks.
//
// Why: ForwardLeanKernel holds a row group's x in registers from its load
// to its output, so the bytes an SM has in flight are bounded by its
// resident blocks, and a block loads nothing while it reduces and writes.
// Here a persistent block keeps the row groups of its next kRingStages - 1
// iterations in flight as cp.async copies (no registers held), so loads
// continue under the reductions and stores of the current rows. Each thread
// copies, and later reads, only its own chunks: the ring needs no barrier,
// only the thread's own cp.async.wait_group. Measured on the H200
// (BENCHMARKS.md, round 9), that pays only for two-block clusters (fp32
// H = 16384: +14%); where the lean kernel is bound by instructions (in-block
// rows) the copies, waits and shared-memory reads cost more than they hide.
//
// The arithmetic is ForwardLeanKernel's: the same plan, chunk mapping,
// RowStatistics and WriteLeanRow, on the same values (a chunk read from
// shared memory is the chunk that was in global memory), so a row gets the
// same bits here as in any other launch (batch invariance;
// ForwardRing.MatchesReferenceAndShortSegmentsBitForBit checks it bit for
// bit).
#pragma once

#include "async_copy.cuh"
#include "forward_lean_kernel.cuh"

namespace normsvc::kernels::detail {

// Row groups per block in the ring: the one being normalized and
// kRingStages - 1 loading.
inline constexpr int kRingStages = 3;
// The plans this kernel serves: four 16-byte chunks a thread.
inline constexpr int kRingSlots = 4;

// Dynamic shared memory of a launch: per stage, kRingSlots 16-byte cells a
// thread (stage s, slot k, thread t at cell (s * kRingSlots + k) * threads +
// t, so that a warp's reads of one slot are 512 contiguous bytes).
__host__ __device__ constexpr std::size_t RingSharedBytes(int block_threads) {
  return static_cast<std::size_t>(kRingStages) * kRingSlots *
         static_cast<std::size_t>(block_threads) * 16;
}

template <typename T, typename P, bool kLayerNorm>
__device__ __forceinline__ void RingRows(const ForwardParams& p, uint4* cells,
                                         ReduceScratch& scratch) {
  constexpr int V = kRingSlots;
  constexpr int W = static_cast<int>(16 / sizeof(T));
  const DeviceSegment& s = p.single;
  const RowTeam team = MakeTeam(p.shape);
  const RowSchedule schedule = MakeSchedule(p.shape, p.row_groups);
  const int chunks = s.hidden / W;
  const unsigned threads = blockDim.x;
  uint4* mine = cells + threadIdx.x;

  // Starts this thread's copies of iteration `it`'s row into `stage`, as one
  // commit group; the group is empty past the last iteration or row, so
  // that every thread commits one group per call and the waits count alike.
  auto issue = [&](int it, int stage) {
    const int64_t row = schedule.FirstRowOf(it) + team.group;
    if (it < schedule.iterations && row < p.total_rows) {
      const T* x = static_cast<const T*>(s.x) + row * s.x_stride;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int chunk = k * team.row_threads + team.rank;
        if (chunk < chunks) {
          CopyAsync16(mine + (stage * V + k) * threads, x + static_cast<int64_t>(chunk) * W);
        }
      }
    }
    CommitAsyncCopies();
  };

#pragma unroll
  for (int i = 0; i < kRingStages; ++i) issue(i, i);
  int stage = 0;
  for (int it = 0; it < schedule.iterations; ++it) {
    // This iteration's group is the oldest of the kRingStages pending.
    WaitAsyncCopies<kRingStages - 1>();
    const int64_t row = schedule.FirstRowOf(it) + team.group;
    const bool active = row < p.total_rows;
    Pack<T, W> v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int chunk = k * team.row_threads + team.rank;
      if (active && chunk < chunks) {
        *reinterpret_cast<uint4*>(&v[k]) = mine[(stage * V + k) * threads];
      } else {
        ZeroPack(v[k]);
      }
    }
    // Every thread of the block reaches the reductions, active row or not.
    const RowStats stats = RowStatistics<T, V, W>(v, chunks, s.hidden, s.epsilon, kLayerNorm, team,
                                                  scratch, (it & 1) * 2);
    // The stage's cells are in registers (the statistics consumed every value
    // read from them, and the copies' asm is a memory clobber, so no read of
    // the cells moves past it): refill the stage with the row group
    // kRingStages iterations ahead.
    issue(it + kRingStages, stage);
    stage = stage + 1 == kRingStages ? 0 : stage + 1;
    // fp32 LayerNorm: the next chunk's parameters are loaded before each
    // chunk's output (kPrefetch), where a persistent block has no other
    // block's rows to run under their latency. RMSNorm, whose row loop keeps
    // two chunks' loads in flight without it, and 16-bit rows (284 bytes of
    // spills) are left as they were.
    if (active) {
      FinishLeanRow<T, P, V, W, kLayerNorm, false, kLayerNorm && sizeof(T) == 4>(s, row, v, stats,
                                                                                 team, chunks);
    }
  }
}

// One kernel an op (kLayerNorm), not a branch on p.op: the registers each
// op's row loop is allocated do not depend on the other's (with the
// parameters' lookahead inlined beside it, RMSNorm's loop spilled and lost
// 0.03 of copy at fp32 H = 16384, BENCHMARKS.md round 34).
template <typename T, typename P, bool kLayerNorm>
__global__ void __launch_bounds__(kLeanMaxThreads, kLeanMinBlocks)
    ForwardRingKernel(const __grid_constant__ ForwardParams p) {
  BeginDependentGrid();
  extern __shared__ __align__(128) unsigned char ring_cells[];
  __shared__ ReduceScratch scratch;
  if (p.shape.cluster > 1) BeginClusterExchanges(scratch);
  RingRows<T, P, kLayerNorm>(p, reinterpret_cast<uint4*>(ring_cells), scratch);
  // No block of a cluster may exit while another may still access its shared memory.
  if (p.shape.cluster > 1) ClusterSync();
}

}  // namespace normsvc::kernels::detail
