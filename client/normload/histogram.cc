#include "histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace normsvc::normload {
namespace {
constexpr uint64_t kSubBuckets = uint64_t{1} << LatencyHistogram::kSubBucketBits;
}  // namespace

int LatencyHistogram::BucketOf(uint64_t nanos) {
  if (nanos < 2 * kSubBuckets) return static_cast<int>(nanos);
  const int msb = 63 - std::countl_zero(nanos);
  int shift = msb - kSubBucketBits;
  if (shift > kMaxShift) return kBucketCount - 1;
  return static_cast<int>(shift * kSubBuckets + (nanos >> shift));
}

uint64_t LatencyHistogram::BucketUpperBound(int bucket) {
  if (bucket < static_cast<int>(2 * kSubBuckets)) return static_cast<uint64_t>(bucket);
  const int shift = bucket / static_cast<int>(kSubBuckets) - 1;
  const uint64_t mantissa = static_cast<uint64_t>(bucket) - shift * kSubBuckets;
  return ((mantissa + 1) << shift) - 1;
}

void LatencyHistogram::Record(uint64_t nanos) {
  counts_[BucketOf(nanos)].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(nanos, std::memory_order_relaxed);
  uint64_t seen = max_.load(std::memory_order_relaxed);
  while (nanos > seen && !max_.compare_exchange_weak(seen, nanos, std::memory_order_relaxed)) {
  }
  seen = min_.load(std::memory_order_relaxed);
  while (nanos < seen && !min_.compare_exchange_weak(seen, nanos, std::memory_order_relaxed)) {
  }
}

HistogramSnapshot LatencyHistogram::Take(bool reset) {
  HistogramSnapshot snapshot;
  for (int i = 0; i < kBucketCount; ++i) {
    const uint64_t count = reset ? counts_[i].exchange(0, std::memory_order_relaxed)
                                 : counts_[i].load(std::memory_order_relaxed);
    snapshot.counts_[i] = count;
    snapshot.count_ += count;
  }
  snapshot.max_ = reset ? max_.exchange(0) : max_.load();
  snapshot.min_ = reset ? min_.exchange(UINT64_MAX) : min_.load();
  snapshot.sum_ = reset ? sum_.exchange(0) : sum_.load();
  return snapshot;
}

void HistogramSnapshot::Add(uint64_t nanos) {
  ++counts_[LatencyHistogram::BucketOf(nanos)];
  ++count_;
  max_ = std::max(max_, nanos);
  min_ = std::min(min_, nanos);
  sum_ += nanos;
}

void HistogramSnapshot::Merge(const HistogramSnapshot& other) {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  max_ = std::max(max_, other.max_);
  min_ = std::min(min_, other.min_);
  sum_ += other.sum_;
}

uint64_t HistogramSnapshot::Percentile(double quantile) const {
  if (count_ == 0) return 0;
  if (quantile >= 1.0) return max_;
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(quantile * count_)));
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank)
      return std::min(LatencyHistogram::BucketUpperBound(static_cast<int>(i)), max_);
  }
  return max_;
}

}  // namespace normsvc::normload
