#include "segment_index.h"

namespace normsvc::kernels::detail {

int SegmentBucketShift(int64_t total_rows, int64_t segments) {
  int shift = 0;
  while (((total_rows + (int64_t{1} << shift) - 1) >> shift) > segments) ++shift;
  return shift;
}

int64_t FillSegmentBuckets(const int64_t* first_rows, int segments, int64_t total_rows, int shift,
                           SegmentBucket* buckets) {
  const int64_t bucket_rows = int64_t{1} << shift;
  const int64_t count = (total_rows + bucket_rows - 1) >> shift;
  // One forward walk: `segment` holds the current row, advanced past every
  // segment that ends before it.
  int segment = 0;
  auto segment_of = [&](int64_t row) {
    while (segment + 1 < segments && first_rows[segment + 1] <= row) ++segment;
    return segment;
  };
  for (int64_t b = 0; b < count; ++b) {
    const int64_t first_row = b * bucket_rows;
    const int64_t last_row =
        first_row + bucket_rows - 1 < total_rows - 1 ? first_row + bucket_rows - 1 : total_rows - 1;
    buckets[b].first = segment_of(first_row);
    buckets[b].last = segment_of(last_row);
  }
  return count;
}

}  // namespace normsvc::kernels::detail
