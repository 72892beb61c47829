// Gives freed heap memory back to the system while the server is idle.
//
// glibc keeps freed memory for reuse: after a burst of large requests the
// process stays at the burst's resident high-water mark (hundreds of MiB)
// with a few MiB in live allocations (server/README.md, "Process and heap
// series"). malloc_trim(0) returns the free pages (madvise), but walks
// every arena with its lock held for milliseconds, so it runs only while no
// request is accepted and unanswered, and only when resident memory has
// grown by `min_growth_bytes` since the last release (or the start): a
// steady load that reuses its memory is never trimmed.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
}

namespace normsvc::server {

// True where ReleaseFreeHeap can give memory back: glibc, and not a
// sanitizer build (whose allocator manages its own memory).
bool HeapReleaseSupported();

// Returns the heap's free pages to the system now. Returns the resident
// bytes given back (resident memory before minus after; 0 when nothing was
// or the platform cannot).
int64_t ReleaseFreeHeap();

struct MemoryReleaseOptions {
  absl::Duration interval = absl::Seconds(10);  // <= 0: no thread (CheckOnce only)
  int64_t min_growth_bytes = int64_t{64} << 20;
};

struct MemoryReleaseMetrics {
  prometheus::Counter* released_bytes = nullptr;  // may be null
  prometheus::Counter* releases = nullptr;        // may be null
};

class IdleMemoryReleaser {
 public:
  // `idle` says whether the server has nothing accepted and unanswered; it
  // is called from the releaser's thread.
  IdleMemoryReleaser(MemoryReleaseOptions options, std::function<bool()> idle,
                     MemoryReleaseMetrics metrics);
  ~IdleMemoryReleaser();  // Stop()
  IdleMemoryReleaser(const IdleMemoryReleaser&) = delete;
  IdleMemoryReleaser& operator=(const IdleMemoryReleaser&) = delete;

  // One check, as the thread makes it every interval: releases when
  // supported, idle, and resident memory is at least `min_growth_bytes`
  // above the baseline (the reading after the last release, or at
  // construction). Returns the bytes given back (0: no release).
  int64_t CheckOnce();
  // Releases now, idle or not, whatever the growth (an operator's request:
  // SIGUSR1 to the server). Counted and logged like an idle release; 0 where
  // releases are not supported. Safe from any thread.
  int64_t ReleaseNow();
  // Ends the thread; idempotent.
  void Stop();

 private:
  void Loop();

  const MemoryReleaseOptions options_;
  const std::function<bool()> idle_;
  const MemoryReleaseMetrics metrics_;
  int64_t ReleaseLocked(int64_t resident, const char* why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(release_mutex_);

  absl::Mutex release_mutex_;  // one release or check at a time
  int64_t baseline_bytes_ ABSL_GUARDED_BY(release_mutex_) = 0;
  absl::Mutex mutex_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace normsvc::server
