#include "soak_tally.h"

#include "absl/strings/str_cat.h"
#include "soak_workload.h"

namespace normsvc::soak {

const char* CategoryName(int category) {
  static const char* const kNames[kCategoryCount] = {
      "valid",     "cancelled", "short_deadline", "malformed",
      "oversized", "huge",      "stream_valid",   "stream_malformed"};
  return category >= 0 && category < kCategoryCount ? kNames[category] : "?";
}

bool CodeAllowed(Category category, grpc::StatusCode code, grpc::StatusCode expected) {
  using grpc::StatusCode;
  switch (category) {
    case kValid:
    case kStreamValid:
      return code == StatusCode::OK || code == StatusCode::RESOURCE_EXHAUSTED;
    case kCancelled:
      return code == StatusCode::OK || code == StatusCode::CANCELLED ||
             code == StatusCode::RESOURCE_EXHAUSTED;
    case kShortDeadline:
      return code == StatusCode::OK || code == StatusCode::DEADLINE_EXCEEDED ||
             code == StatusCode::RESOURCE_EXHAUSTED;
    default:
      return code == expected;
  }
}

void Tally::Final(Category category, grpc::StatusCode code, grpc::StatusCode expected,
                  const std::string& message) {
  const int index = static_cast<int>(code);
  codes_[category][index >= 0 && index < kCodeCount ? index : 2].fetch_add(1);
  if (!CodeAllowed(category, code, expected)) {
    unexpected_.fetch_add(1);
    Note(absl::StrCat("unexpected ", CodeName(index), " for a ", CategoryName(category),
                      " request: ", message));
  }
}

void Tally::Wrong(const std::string& what) {
  wrong_.fetch_add(1);
  Note(absl::StrCat("wrong result: ", what));
}

void Tally::Duplicate(const std::string& what) {
  duplicates_.fetch_add(1);
  Note(absl::StrCat("second final status: ", what));
}

void Tally::Lost(uint64_t count, const std::string& what) {
  if (count == 0) return;
  lost_.fetch_add(count);
  Note(absl::StrCat(count, " without a final status: ", what));
}

void Tally::Failure(const std::string& what) {
  failures_.fetch_add(1);
  Note(what);
}

void Tally::Note(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (messages_.size() < 20) messages_.push_back(what);
}

void Tally::OkLatency(double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  ok_latency_ms_.push_back(static_cast<float>(ms));
}

uint64_t Tally::total_sent() const {
  uint64_t total = 0;
  for (const auto& count : sent_) total += count.load();
  return total;
}

uint64_t Tally::total_code(int code) const {
  uint64_t total = 0;
  for (const auto& category : codes_) total += category[code].load();
  return total;
}

std::vector<std::string> Tally::messages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_;
}

double Tally::OkLatencyQuantile(double q) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ok_latency_ms_.empty()) return 0;
  std::vector<float> sorted = ok_latency_ms_;
  const size_t rank = std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
  std::nth_element(sorted.begin(), sorted.begin() + rank, sorted.end());
  return sorted[rank];
}

uint64_t Tally::ok_latency_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ok_latency_ms_.size();
}

}  // namespace normsvc::soak
