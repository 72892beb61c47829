#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "histogram.h"

namespace normsvc::normload {
namespace {

TEST(HistogramTest, BucketsCoverValuesWithinOnePart128) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 100000; ++trial) {
    const uint64_t value = rng() >> (24 + rng() % 40);  // below 2^40 ns, inside the range
    const int bucket = LatencyHistogram::BucketOf(value);
    const uint64_t upper = LatencyHistogram::BucketUpperBound(bucket);
    ASSERT_GE(upper, value);
    ASSERT_LE(static_cast<double>(upper - value), std::max(1.0, value / 128.0)) << value;
    if (bucket > 0) {
      ASSERT_LT(LatencyHistogram::BucketUpperBound(bucket - 1), value);
    }
  }
}

TEST(HistogramTest, ValuesPastTheRangeLandInTheLastBucket) {
  EXPECT_EQ(LatencyHistogram::BucketOf(uint64_t{1} << 50), LatencyHistogram::kBucketCount - 1);
  EXPECT_EQ(LatencyHistogram::BucketOf(UINT64_MAX), LatencyHistogram::kBucketCount - 1);
  EXPECT_EQ(LatencyHistogram::BucketOf(255), 255);
}

TEST(HistogramTest, PercentilesMatchSortedValues) {
  std::mt19937_64 rng(std::random_device{}());
  std::lognormal_distribution<double> latency(std::log(1e6), 0.8);  // ~1 ms
  std::vector<uint64_t> values(50000);
  LatencyHistogram histogram;
  for (uint64_t& value : values) {
    value = static_cast<uint64_t>(latency(rng));
    histogram.Record(value);
  }
  std::sort(values.begin(), values.end());
  const HistogramSnapshot snapshot = histogram.Take(false);
  ASSERT_EQ(snapshot.count(), values.size());
  EXPECT_EQ(snapshot.max(), values.back());
  EXPECT_EQ(snapshot.min(), values.front());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const uint64_t exact = values[static_cast<size_t>(std::ceil(q * values.size())) - 1];
    const uint64_t reported = snapshot.Percentile(q);
    EXPECT_GE(reported, exact) << q;
    EXPECT_LE(reported, exact + exact / 128 + 1) << q;
  }
}

TEST(HistogramTest, ConcurrentRecordsAreAllCountedAndResetEmpties) {
  LatencyHistogram histogram;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&histogram, t] {
      for (int i = 0; i < 25000; ++i) histogram.Record(1000 + 37 * i + t);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(histogram.Take(true).count(), 100000u);
  EXPECT_EQ(histogram.Take(false).count(), 0u);
}

}  // namespace
}  // namespace normsvc::normload
