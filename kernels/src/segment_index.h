// The row -> segment index of a multi-segment forward launch.
//
// A launch's rows are numbered across its segments (segment i holds rows
// first_rows[i] .. first_rows[i + 1] - 1). The index cuts those rows into
// buckets of 2^shift rows and stores, per bucket, the segments holding its
// first and its last row. A row's segment is then one 8-byte load when its
// bucket lies inside one segment (the common case: a bucket is never wider
// than the average segment), else a binary search over the few segments the
// bucket spans. The shift is the smallest that leaves at most as many
// buckets as segments, so the index takes 8 bytes a segment whatever the
// row count: ForwardWorkspaceBytes stays a function of the segment count.
//
// Pure C++ with host/device lookup, so that the index is built and checked
// on machines without a GPU and the kernels run the same lookup.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define NORMSVC_HOST_DEVICE __host__ __device__
#else
#define NORMSVC_HOST_DEVICE
#endif

namespace normsvc::kernels::detail {

struct alignas(8) SegmentBucket {
  int32_t first;  // segment holding the bucket's first row
  int32_t last;   // segment holding the bucket's last row
};

// The smallest shift for which ceil(total_rows / 2^shift) <= segments
// (segments >= 1, total_rows >= segments: every segment has a row).
int SegmentBucketShift(int64_t total_rows, int64_t segments);

// Buckets of 2^shift rows for segments whose first rows are `first_rows`
// (strictly increasing, first_rows[0] == 0), `total_rows` rows in all.
// Writes ceil(total_rows / 2^shift) buckets and returns that count.
int64_t FillSegmentBuckets(const int64_t* first_rows, int segments, int64_t total_rows, int shift,
                           SegmentBucket* buckets);

// Whether the buckets are the identity (bucket i is segment i, alone), given
// the rows every segment has (`equal_rows`: -1 when they differ) and the
// bucket shift: when every segment has exactly 2^shift rows. Then a row's
// segment is row >> shift, with no load at all (a batch of one-row
// requests, say). A function of the row counts alone, so that a launch knows
// it without the table image.
inline bool SegmentBucketsAreIdentity(int64_t equal_rows, int shift) {
  return equal_rows == (int64_t{1} << shift);
}

// Index of the segment that holds `row` (0 <= row < total_rows).
NORMSVC_HOST_DEVICE inline int FindSegment(const int64_t* first_rows, const SegmentBucket* buckets,
                                           int shift, int64_t row) {
  const SegmentBucket bucket = buckets[row >> shift];
  int lo = bucket.first;
  int hi = bucket.last;
  // The answer is in [lo, hi]: the last segment whose first row is <= row.
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (first_rows[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace normsvc::kernels::detail

#undef NORMSVC_HOST_DEVICE
