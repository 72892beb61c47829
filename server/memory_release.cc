#include "server/memory_release.h"

#include <malloc.h>

#include <algorithm>
#include <optional>

#include <prometheus/counter.h>

#include "absl/strings/str_format.h"
#include "server/log.h"
#include "server/process_telemetry.h"
#include "server/sanitizer_allocator.h"
#include "server/thread_name.h"

namespace normsvc::server {

#if defined(__GLIBC__) && !defined(NORMSVC_SANITIZER_ALLOCATOR)
#define NORMSVC_GLIBC_HEAP 1
#endif

bool HeapReleaseSupported() {
#ifdef NORMSVC_GLIBC_HEAP
  return true;
#else
  return false;
#endif
}

int64_t ReleaseFreeHeap() {
#ifdef NORMSVC_GLIBC_HEAP
  const std::optional<int64_t> before = ReadResidentBytes();
  malloc_trim(0);
  const std::optional<int64_t> after = ReadResidentBytes();
  if (before && after) return std::max<int64_t>(0, *before - *after);
#endif
  return 0;
}

IdleMemoryReleaser::IdleMemoryReleaser(MemoryReleaseOptions options, std::function<bool()> idle,
                                       MemoryReleaseMetrics metrics)
    : options_(options),
      idle_(std::move(idle)),
      metrics_(metrics),
      baseline_bytes_(ReadResidentBytes().value_or(0)) {
  if (options_.interval > absl::ZeroDuration() && HeapReleaseSupported()) {
    thread_ = std::thread([this] {
      NameCurrentThread("memory-release");
      Loop();
    });
  }
}

IdleMemoryReleaser::~IdleMemoryReleaser() { Stop(); }

int64_t IdleMemoryReleaser::CheckOnce() {
  if (!HeapReleaseSupported()) return 0;
  absl::MutexLock lock(&release_mutex_);
  const std::optional<int64_t> resident = ReadResidentBytes();
  if (!resident) return 0;  // no /proc: nothing to measure growth by
  // A release can leave resident memory below the baseline; follow it down.
  baseline_bytes_ = std::min(baseline_bytes_, *resident);
  if (*resident - baseline_bytes_ < options_.min_growth_bytes || !idle_()) return 0;
  return ReleaseLocked(*resident, "idle");
}

int64_t IdleMemoryReleaser::ReleaseNow() {
  if (!HeapReleaseSupported()) return 0;
  absl::MutexLock lock(&release_mutex_);
  const std::optional<int64_t> resident = ReadResidentBytes();
  if (!resident) return 0;
  return ReleaseLocked(*resident, "on request");
}

int64_t IdleMemoryReleaser::ReleaseLocked(int64_t resident, const char* why) {
  const absl::Time start = absl::Now();
  const int64_t released = ReleaseFreeHeap();
  baseline_bytes_ = resident - released;
  if (metrics_.releases != nullptr) metrics_.releases->Increment();
  if (metrics_.released_bytes != nullptr) {
    metrics_.released_bytes->Increment(static_cast<double>(released));
  }
  Log(LogLevel::kInfo,
      absl::StrFormat("%s: gave %.1f MiB of freed heap back to the system in %.1f ms "
                      "(resident %.1f MiB now)",
                      why, released / 1048576.0, absl::ToDoubleMilliseconds(absl::Now() - start),
                      baseline_bytes_ / 1048576.0));
  return released;
}

void IdleMemoryReleaser::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  wake_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void IdleMemoryReleaser::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      const absl::Time until = absl::Now() + options_.interval;
      while (!stopping_ && absl::Now() < until) wake_.WaitWithDeadline(&mutex_, until);
      if (stopping_) return;
    }
    CheckOnce();
  }
}

}  // namespace normsvc::server
