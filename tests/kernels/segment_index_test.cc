// The row -> segment index of multi-segment launches (kernels/src/
// segment_index.h): for random and adversarial segment layouts, every row is
// found in the segment a plain scan of the first rows says, the index never
// has more buckets than segments, and a bucket inside one segment answers
// without a search. Pure C++ (the kernels run the same FindSegment): runs
// without a GPU.
#include "segment_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace normsvc::kernels::detail {
namespace {

struct Layout {
  std::vector<int64_t> first_rows;
  int64_t total_rows = 0;
};

Layout FromRowCounts(const std::vector<int64_t>& rows) {
  Layout l;
  for (int64_t r : rows) {
    l.first_rows.push_back(l.total_rows);
    l.total_rows += r;
  }
  return l;
}

// The segment of `row` by a linear scan: the oracle.
int ScanSegment(const Layout& l, int64_t row) {
  int s = 0;
  for (int i = 0; i < static_cast<int>(l.first_rows.size()); ++i) {
    if (l.first_rows[i] <= row) s = i;
  }
  return s;
}

// Builds the index for `l` and checks every row against the scan.
void ExpectEveryRowFound(const Layout& l, const std::string& what) {
  const int segments = static_cast<int>(l.first_rows.size());
  const int shift = SegmentBucketShift(l.total_rows, segments);
  // Poisoned, so that a bucket the fill skips cannot pass.
  std::vector<SegmentBucket> buckets(segments + 1, SegmentBucket{-7, -9});
  const int64_t count =
      FillSegmentBuckets(l.first_rows.data(), segments, l.total_rows, shift, buckets.data());
  ASSERT_LE(count, segments) << what;
  ASSERT_EQ(count, (l.total_rows + (int64_t{1} << shift) - 1) >> shift) << what;
  if (shift > 0) {
    // The smallest shift: one less would need more buckets than segments.
    ASSERT_GT((l.total_rows + (int64_t{1} << (shift - 1)) - 1) >> (shift - 1), segments) << what;
  }
  EXPECT_EQ(buckets[count].first, -7) << what << ": wrote past the buckets";
  for (int64_t row = 0; row < l.total_rows; ++row) {
    const int expected = ScanSegment(l, row);
    ASSERT_EQ(FindSegment(l.first_rows.data(), buckets.data(), shift, row), expected)
        << what << ": row " << row;
  }
}

// SegmentBucketsAreIdentity holds for equal segments of a power-of-two row
// count, and only where row >> shift is the segment FindSegment finds for
// every row (it may miss some such layouts: a shorter last segment).
TEST(SegmentIndex, IdentityForEqualPowerOfTwoSegmentsAndOnlyWhereShiftsFindEveryRow) {
  for (const std::vector<int64_t>& rows :
       {std::vector<int64_t>(37, 1), std::vector<int64_t>(37, 2), std::vector<int64_t>(5, 64),
        std::vector<int64_t>(20, 3), std::vector<int64_t>{2, 2, 2, 1}, std::vector<int64_t>{1, 2},
        std::vector<int64_t>{4, 4, 4, 8}, std::vector<int64_t>{8, 8, 8, 4}}) {
    const Layout l = FromRowCounts(rows);
    const int n = static_cast<int>(rows.size());
    const int shift = SegmentBucketShift(l.total_rows, n);
    int64_t equal_rows = rows[0];
    for (int64_t r : rows) {
      if (r != equal_rows) equal_rows = -1;
    }
    std::vector<SegmentBucket> buckets(n);
    FillSegmentBuckets(l.first_rows.data(), n, l.total_rows, shift, buckets.data());
    bool shifts_find_every_row = true;
    for (int64_t row = 0; row < l.total_rows; ++row) {
      shifts_find_every_row =
          shifts_find_every_row && FindSegment(l.first_rows.data(), buckets.data(), shift, row) ==
                                       static_cast<int>(row >> shift);
    }
    const bool power_of_two = equal_rows > 0 && (equal_rows & (equal_rows - 1)) == 0;
    EXPECT_EQ(SegmentBucketsAreIdentity(equal_rows, shift), power_of_two)
        << n << " segments of " << rows[0] << " (equal: " << (equal_rows > 0) << ")";
    if (SegmentBucketsAreIdentity(equal_rows, shift)) {
      EXPECT_TRUE(shifts_find_every_row) << n << " segments of " << rows[0];
    }
  }
  EXPECT_TRUE(SegmentBucketsAreIdentity(1, 0));
  EXPECT_FALSE(SegmentBucketsAreIdentity(3, 2));
  EXPECT_FALSE(SegmentBucketsAreIdentity(-1, 0));
}

TEST(SegmentIndex, OneRowSegmentsTakeOneBucketEach) {
  const Layout l = FromRowCounts(std::vector<int64_t>(1000, 1));
  EXPECT_EQ(SegmentBucketShift(l.total_rows, 1000), 0);
  std::vector<SegmentBucket> buckets(1000);
  ASSERT_EQ(FillSegmentBuckets(l.first_rows.data(), 1000, l.total_rows, 0, buckets.data()), 1000);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(buckets[i].first, i);
    EXPECT_EQ(buckets[i].last, i);  // no search needed
  }
  ExpectEveryRowFound(l, "1000 x 1");
}

TEST(SegmentIndex, EqualSegmentsNeedAShortSearchAtMost) {
  for (int64_t rows : {2, 3, 7, 16, 37}) {
    const Layout l = FromRowCounts(std::vector<int64_t>(64, rows));
    const int shift = SegmentBucketShift(l.total_rows, 64);
    std::vector<SegmentBucket> buckets(64);
    const int64_t count =
        FillSegmentBuckets(l.first_rows.data(), 64, l.total_rows, shift, buckets.data());
    // Buckets are shorter than two segments (the smallest power of two that
    // is at least a segment long), so one spans at most three: a search of
    // at most two steps. Segments of a power-of-two length need none.
    const bool power_of_two = (rows & (rows - 1)) == 0;
    for (int64_t b = 0; b < count; ++b) {
      EXPECT_LE(buckets[b].last - buckets[b].first, power_of_two ? 0 : 2) << rows << " rows";
    }
    ExpectEveryRowFound(l, "64 x " + std::to_string(rows));
  }
}

TEST(SegmentIndex, SkewedLayoutsFindEveryRow) {
  // One long segment among many single rows, at the start, middle and end.
  for (int at : {0, 250, 499}) {
    std::vector<int64_t> rows(500, 1);
    rows[at] = 100000;
    ExpectEveryRowFound(FromRowCounts(rows), "skewed at " + std::to_string(at));
  }
  ExpectEveryRowFound(FromRowCounts({1, 1}), "two rows");
  ExpectEveryRowFound(FromRowCounts({5, 1}), "5 + 1");
  ExpectEveryRowFound(FromRowCounts({1, 1 << 20}), "1 + 2^20");
}

TEST(SegmentIndex, RandomLayoutsFindEveryRow) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int segments = 2 + static_cast<int>(rng() % 300);
    std::vector<int64_t> rows(segments);
    const int64_t most = int64_t{1} << (rng() % 12);
    for (int64_t& r : rows) r = 1 + static_cast<int64_t>(rng() % most);
    ExpectEveryRowFound(FromRowCounts(rows), "trial " + std::to_string(trial));
  }
}

}  // namespace
}  // namespace normsvc::kernels::detail
