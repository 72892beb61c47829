// Latency histogram with HDR-style log-linear buckets: values below 256 ns
// are exact; above, every power-of-two range is split into 128 equal
// sub-buckets, so any recorded value is known to within 1/128 (0.8%).
// Covers 1 ns .. ~18 minutes in 4,480 buckets. Record() is lock-free and
// safe from any number of threads (relaxed atomics); snapshots are plain.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace normsvc::normload {

class HistogramSnapshot;

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;  // 128 sub-buckets per octave
  static constexpr int kMaxShift = 33;      // values up to 2^41 ns
  static constexpr int kBucketCount =
      (kMaxShift + 1) * (1 << kSubBucketBits) + (1 << kSubBucketBits);

  // Bucket index of a value in nanoseconds (values past the range clamp).
  static int BucketOf(uint64_t nanos);
  // The largest value that falls into `bucket` (what percentiles report,
  // so a percentile never understates the latency).
  static uint64_t BucketUpperBound(int bucket);

  void Record(uint64_t nanos);
  // Copies the counts; with `reset`, also zeroes them (for interval stats;
  // a value recorded concurrently lands in one interval or the next).
  HistogramSnapshot Take(bool reset);

 private:
  std::array<std::atomic<uint64_t>, kBucketCount> counts_{};
  std::atomic<uint64_t> max_{0};
  std::atomic<uint64_t> min_{UINT64_MAX};
  std::atomic<uint64_t> sum_{0};
};

class HistogramSnapshot {
 public:
  HistogramSnapshot() : counts_(LatencyHistogram::kBucketCount, 0) {}

  void Add(uint64_t nanos);  // single-threaded recording (tests, merging)
  void Merge(const HistogramSnapshot& other);
  uint64_t count() const { return count_; }
  uint64_t max() const { return count_ ? max_ : 0; }
  uint64_t min() const { return count_ ? min_ : 0; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0.0; }
  // Smallest bucket bound B with at least `quantile` of the values <= B
  // (exact max for quantile 1); 0 when empty.
  uint64_t Percentile(double quantile) const;

 private:
  friend class LatencyHistogram;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t max_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t sum_ = 0;
};

}  // namespace normsvc::normload
