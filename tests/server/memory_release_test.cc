// IdleMemoryReleaser and ReleaseFreeHeap: freed heap memory goes back to the
// system (resident memory read here from /proc/self/status), only while
// idle, only after enough growth, and counted.
#include "server/memory_release.h"

#include <malloc.h>

#include <atomic>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "absl/time/clock.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Allocates `bytes` in 64 KiB blocks (below glibc's mmap threshold, so they
// come from the heap) filled with random words, with a small block kept
// between them so that freeing the large ones leaves free memory inside the
// heap rather than at its top. Then frees the large blocks; the small ones
// live until the object goes. While it lives, free() does not trim the
// heap's top by itself (M_TRIM_THRESHOLD): the small blocks may be served
// from free chunks that earlier allocations of the process left, and then
// the burst ends at the top, which free() would give back before
// ReleaseFreeHeap is asked to (seen in about one full server_test run in
// four of a Release build).
class FreedBurst {
 public:
  explicit FreedBurst(int64_t bytes) {
    if (HeapReleaseSupported()) mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    std::mt19937 random(std::random_device{}());
    std::vector<std::unique_ptr<uint32_t[]>> blocks;
    constexpr size_t kWords = 16384;  // 64 KiB
    for (int64_t done = 0; done < bytes; done += kWords * sizeof(uint32_t)) {
      blocks.emplace_back(new uint32_t[kWords]);
      for (size_t i = 0; i < kWords; i += 1024) blocks.back()[i] = random();
      pins_.emplace_back(new uint32_t[16]);
      pins_.back()[0] = blocks.back()[0];
    }
  }
  ~FreedBurst() {
    if (HeapReleaseSupported()) mallopt(M_TRIM_THRESHOLD, kGlibcDefaultTrimThreshold);
  }
  FreedBurst(const FreedBurst&) = delete;
  FreedBurst& operator=(const FreedBurst&) = delete;

 private:
  static constexpr int kGlibcDefaultTrimThreshold = 128 * 1024;
  std::vector<std::unique_ptr<uint32_t[]>> pins_;
};

constexpr const char* kNoRelease =
    "the heap is given back through glibc's malloc_trim; this build's allocator is a "
    "sanitizer's, which manages its own memory";

TEST(MemoryReleaseTest, ReleaseFreeHeapGivesFreedMemoryBack) {
  if (!HeapReleaseSupported()) GTEST_SKIP() << kNoRelease;
  const FreedBurst burst(256 * kMiB);
  const int64_t kept = StatusResidentBytes();
  const int64_t released = ReleaseFreeHeap();
  const int64_t after = StatusResidentBytes();
  EXPECT_GE(released, 200 * kMiB);
  EXPECT_GE(kept - after, 200 * kMiB) << "resident " << kept << " -> " << after;
  EXPECT_NEAR(static_cast<double>(released), static_cast<double>(kept - after), 8.0 * kMiB);
}

TEST(MemoryReleaseTest, ReleasesOnlyWhenIdleAndGrownAndCountsIt) {
  if (!HeapReleaseSupported()) GTEST_SKIP() << kNoRelease;
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter().Name("releases").Register(registry);
  prometheus::Counter& releases = family.Add({{"kind", "count"}});
  prometheus::Counter& released_bytes = family.Add({{"kind", "bytes"}});
  std::atomic<bool> idle{false};
  IdleMemoryReleaser releaser({absl::ZeroDuration(), 64 * kMiB}, [&idle] { return idle.load(); },
                              {&released_bytes, &releases});
  // Below the growth threshold nothing happens, idle or not.
  idle = true;
  EXPECT_EQ(releaser.CheckOnce(), 0);
  EXPECT_EQ(releases.Value(), 0);

  const FreedBurst burst(256 * kMiB);
  idle = false;
  EXPECT_EQ(releaser.CheckOnce(), 0) << "released while busy";
  EXPECT_EQ(releases.Value(), 0);

  idle = true;
  const int64_t before = StatusResidentBytes();
  const int64_t released = releaser.CheckOnce();
  EXPECT_GE(released, 200 * kMiB);
  EXPECT_GE(before - StatusResidentBytes(), 200 * kMiB);
  EXPECT_EQ(releases.Value(), 1);
  EXPECT_EQ(released_bytes.Value(), static_cast<double>(released));

  // Nothing grew since: no second release.
  EXPECT_EQ(releaser.CheckOnce(), 0);
  EXPECT_EQ(releases.Value(), 1);
}

TEST(MemoryReleaseTest, ReleaseNowReleasesBusyOrNotWithoutGrowthAndCountsIt) {
  if (!HeapReleaseSupported()) GTEST_SKIP() << kNoRelease;
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter().Name("releases").Register(registry);
  prometheus::Counter& releases = family.Add({{"kind", "count"}});
  prometheus::Counter& released_bytes = family.Add({{"kind", "bytes"}});
  // Busy, and a growth threshold the burst never reaches: CheckOnce would
  // not release; ReleaseNow does.
  IdleMemoryReleaser releaser({absl::ZeroDuration(), 1024 * kMiB}, [] { return false; },
                              {&released_bytes, &releases});
  const FreedBurst burst(128 * kMiB);
  EXPECT_EQ(releaser.CheckOnce(), 0);
  const int64_t before = StatusResidentBytes();
  const int64_t released = releaser.ReleaseNow();
  EXPECT_GE(released, 100 * kMiB);
  EXPECT_GE(before - StatusResidentBytes(), 100 * kMiB);
  EXPECT_EQ(releases.Value(), 1);
  EXPECT_EQ(released_bytes.Value(), static_cast<double>(released));
  // A second request is counted even when there is little left to give.
  releaser.ReleaseNow();
  EXPECT_EQ(releases.Value(), 2);
}

TEST(MemoryReleaseTest, TheThreadReleasesWithinAnIntervalAndStops) {
  if (!HeapReleaseSupported()) GTEST_SKIP() << kNoRelease;
  prometheus::Registry registry;
  prometheus::Counter& releases =
      prometheus::BuildCounter().Name("releases").Register(registry).Add({});
  std::atomic<bool> idle{false};  // busy while the burst is made
  IdleMemoryReleaser releaser({absl::Milliseconds(50), 64 * kMiB}, [&idle] { return idle.load(); },
                              {nullptr, &releases});
  const FreedBurst burst(256 * kMiB);
  const int64_t before = StatusResidentBytes();
  idle = true;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (releases.Value() < 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(releases.Value(), 1);
  EXPECT_GE(before - StatusResidentBytes(), 200 * kMiB);
  const absl::Time stop = absl::Now();
  releaser.Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(1));
}

}  // namespace
}  // namespace normsvc::server::testing
