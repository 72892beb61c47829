// Finds the segment a row of a multi-segment launch belongs to.
#pragma once

#include "kernel_params.h"
#include "segment_index.h"

namespace normsvc::kernels::detail {

// The segment of `row` (a row of the launch) and, in *local_row, the row
// within it. Each thread looks up its own row: no load when every segment
// has the same power-of-two row count, else one load of the row's bucket
// (segment_index.h) and a short search only where the bucket spans several
// segments; then the segment's entry. No barrier and no shared memory.
__device__ __forceinline__ const DeviceSegment* LocateSegment(const ForwardParams& p, int64_t row,
                                                              int64_t* local_row) {
  if (p.segment_count == 1) {
    *local_row = row;
    return &p.single;
  }
  const int s = p.buckets_identity ? static_cast<int>(row >> p.bucket_shift)
                                   : FindSegment(p.first_rows, p.buckets, p.bucket_shift, row);
  const DeviceSegment* segment = p.table + s;
  *local_row = row - segment->first_row;
  return segment;
}

}  // namespace normsvc::kernels::detail
