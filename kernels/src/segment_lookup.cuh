// Finds the segment a row of a multi-segment launch belongs to.
#pragma once

#include "kernel_params.h"

namespace normsvc::kernels::detail {

// Index of the last segment whose first row is <= row, searched by one warp
// 32 ways at a time (1,000 segments: two rounds of loads). All 32 lanes of
// the calling warp must call it with the same arguments.
__device__ __forceinline__ int WarpFindSegment(const int64_t* first_rows, int count, int64_t row) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  int lo = 0;
  int n = count;
  while (n > 1) {
    const int step = (n + 31) / 32;
    const int offset = lane * step;
    const bool at_or_before = offset < n && first_rows[lo + offset] <= row;
    const unsigned ballot = __ballot_sync(0xffffffffu, at_or_before);
    const int k = 31 - __clz(static_cast<int>(ballot));  // lane 0 is always set
    lo += k * step;
    n = min(step, n - k * step);
  }
  return lo;
}

// Index of the last segment in [lo, hi) whose first row is <= row, given that
// first_rows[lo] <= row.
__device__ __forceinline__ int FindSegmentIn(const int64_t* first_rows, int lo, int hi,
                                             int64_t row) {
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first_rows[mid] <= row) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The segment of `row` for every thread of the block: warp 0 finds the
// segment of the block's first row, then each row group searches the few
// segments its block can span. Contains a __syncthreads(); call it from every
// thread of the block, with `parity` alternating between consecutive calls
// (the shared result is double-buffered).
__device__ __forceinline__ const DeviceSegment* LocateSegment(const ForwardParams& p,
                                                              int64_t block_row, int64_t row,
                                                              int parity, int64_t* local_row) {
  if (p.segment_count == 1) {
    *local_row = row;
    return &p.single;
  }
  __shared__ int block_first_segment[2];
  if (threadIdx.x < 32) {
    const int s = WarpFindSegment(p.first_rows, p.segment_count, block_row);
    if (threadIdx.x == 0) block_first_segment[parity] = s;
  }
  __syncthreads();
  const int first = block_first_segment[parity];
  const int end = min(p.segment_count, first + p.shape.groups);
  const int s = FindSegmentIn(p.first_rows, first, end, row);
  *local_row = row - p.first_rows[s];
  return p.table + s;
}

}  // namespace normsvc::kernels::detail
