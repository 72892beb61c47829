// What the soak test counts: every request's final status by category and
// code, the checks that must hold for each category, wrong results, lost
// and duplicated statuses, and OK latencies. Updated from gRPC threads.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

namespace normsvc::soak {

inline constexpr int kCodeCount = 17;

// Why a request was sent; each category allows its own final codes.
enum Category {
  kValid,      // OK, or RESOURCE_EXHAUSTED when the queue is full
  kCancelled,  // cancelled by the client after a random delay: OK, CANCELLED, RESOURCE_EXHAUSTED
  kShortDeadline,    // deadline shorter than the queue wait: OK, DEADLINE_EXCEEDED,
                     // RESOURCE_EXHAUSTED
  kMalformed,        // exactly its expected code
  kOversized,        // exactly its expected code
  kHuge,             // exactly its expected code
  kStreamValid,      // per stream request: OK, RESOURCE_EXHAUSTED
  kStreamMalformed,  // per stream request: exactly its expected code
  kCategoryCount
};
const char* CategoryName(int category);

// True when `code` is a correct final status for a request of `category`
// (`expected` is the code an invalid request must get).
bool CodeAllowed(Category category, grpc::StatusCode code, grpc::StatusCode expected);

class Tally {
 public:
  void Sent(Category category) { sent_[category].fetch_add(1, std::memory_order_relaxed); }
  // Records one final status; checks it against the category.
  void Final(Category category, grpc::StatusCode code, grpc::StatusCode expected,
             const std::string& message);
  void Wrong(const std::string& what);
  void Duplicate(const std::string& what);
  void Lost(uint64_t count, const std::string& what);
  void Abandoned(uint64_t count) { abandoned_.fetch_add(count); }
  void Failure(const std::string& what);  // any other broken expectation
  void OkLatency(double ms);
  void StreamEnded(bool disconnected) {
    (disconnected ? streams_disconnected_ : streams_completed_).fetch_add(1);
  }

  uint64_t sent(int category) const { return sent_[category].load(); }
  uint64_t count(int category, int code) const { return codes_[category][code].load(); }
  uint64_t total_sent() const;
  uint64_t total_code(int code) const;
  uint64_t wrong() const { return wrong_.load(); }
  uint64_t unexpected() const { return unexpected_.load(); }
  uint64_t duplicates() const { return duplicates_.load(); }
  uint64_t lost() const { return lost_.load(); }
  uint64_t abandoned() const { return abandoned_.load(); }
  uint64_t failures() const { return failures_.load(); }
  uint64_t streams_completed() const { return streams_completed_.load(); }
  uint64_t streams_disconnected() const { return streams_disconnected_.load(); }
  // The first few problems, for the report.
  std::vector<std::string> messages() const;
  // Quantile (0..1) of the OK latencies in milliseconds; 0 without any.
  double OkLatencyQuantile(double q) const;
  uint64_t ok_latency_count() const;

 private:
  void Note(const std::string& what);

  std::array<std::atomic<uint64_t>, kCategoryCount> sent_{};
  std::array<std::array<std::atomic<uint64_t>, kCodeCount>, kCategoryCount> codes_{};
  std::atomic<uint64_t> wrong_{0}, unexpected_{0}, duplicates_{0}, lost_{0}, abandoned_{0},
      failures_{0}, streams_completed_{0}, streams_disconnected_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
  std::vector<float> ok_latency_ms_;
};

}  // namespace normsvc::soak
