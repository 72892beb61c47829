// ProcessTelemetry: each series against what the test itself changes (file
// descriptors, threads, heap bytes, CPU time) and against /proc read here.
#include "server/process_telemetry.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.h"

namespace normsvc::server::testing {
namespace {

// Every sample of a collection, by family name (the series are unlabelled).
std::map<std::string, double> Sample(const ProcessTelemetry& telemetry) {
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& family : telemetry.Collect()) {
    EXPECT_EQ(family.metric.size(), 1u) << family.name;
    if (family.metric.empty()) continue;
    const prometheus::ClientMetric& metric = family.metric.front();
    values[family.name] =
        family.type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value;
  }
  return values;
}

TEST(ProcessTelemetryTest, ReportsTheStandardProcessSeries) {
  const ProcessTelemetry telemetry;
  const std::map<std::string, double> values = Sample(telemetry);
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_threads", "process_open_fds",
        "process_start_time_seconds", "normsvc_heap_allocated_bytes", "normsvc_heap_free_bytes"}) {
    EXPECT_TRUE(values.count(name)) << name;
  }
  EXPECT_NEAR(values.at("process_resident_memory_bytes"),
              static_cast<double>(StatusResidentBytes()), 8 << 20);
  EXPECT_GT(values.at("process_virtual_memory_bytes"), values.at("process_resident_memory_bytes"));
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(values.at("process_start_time_seconds"), now + 1);
  EXPECT_GT(values.at("process_start_time_seconds"), now - 3600);
}

// Runs `change` (which makes `delta` more of what `series` counts and
// returns a function that undoes it) and expects the series to move by
// exactly `delta` and back. Threads and descriptors of other parts of the
// process (gRPC's pools, left from earlier tests in this binary) may come or
// go meanwhile: a round disturbed so is repeated, five rounds at most.
template <typename Change>
void ExpectExactChange(const char* series, double delta, Change change) {
  const ProcessTelemetry telemetry;
  double before = 0, during = 0, after = 0;
  for (int round = 0; round < 5; ++round) {
    before = Sample(telemetry).at(series);
    auto undo = change();
    during = Sample(telemetry).at(series);
    undo();
    after = Sample(telemetry).at(series);
    if (during == before + delta && after == before) return;
  }
  ADD_FAILURE() << series << ": before " << before << ", during " << during << " (expected +"
                << delta << "), after " << after;
}

TEST(ProcessTelemetryTest, CountsOpenFileDescriptorsExactly) {
  ExpectExactChange("process_open_fds", 5, [] {
    auto descriptors = std::make_shared<std::vector<int>>();
    for (int i = 0; i < 5; ++i) descriptors->push_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
    for (int fd : *descriptors) EXPECT_GE(fd, 0) << std::strerror(errno);
    return [descriptors] {
      for (int fd : *descriptors) close(fd);
    };
  });
}

TEST(ProcessTelemetryTest, CountsThreadsExactly) {
  ExpectExactChange("process_threads", 3, [] {
    // std::promise rather than absl::Notification: the ThreadSanitizer
    // build's Abseil annotations (tests/tsan) cover CondVar waits only.
    auto release = std::make_shared<std::promise<void>>();
    std::shared_future<void> released = release->get_future().share();
    auto threads = std::make_shared<std::vector<std::thread>>();
    for (int i = 0; i < 3; ++i) threads->emplace_back([released] { released.wait(); });
    return [release, threads] {
      release->set_value();
      for (std::thread& thread : *threads) thread.join();
    };
  });
}

TEST(ProcessTelemetryTest, HeapAllocatedBytesFollowAnAllocation) {
  const std::optional<HeapUsage> before = ReadHeapUsage();
  ASSERT_TRUE(before.has_value()) << "no allocator statistics in this build";
  // 48 MiB of random bytes (written, so the allocation cannot be elided).
  constexpr size_t kBytes = size_t{48} << 20;
  std::unique_ptr<uint32_t[]> block(new uint32_t[kBytes / sizeof(uint32_t)]);
  std::mt19937 random(std::random_device{}());
  for (size_t i = 0; i < kBytes / sizeof(uint32_t); i += 1024) block[i] = random();
  const std::optional<HeapUsage> during = ReadHeapUsage();
  const int64_t grown = during->allocated_bytes - before->allocated_bytes;
  EXPECT_GE(grown, static_cast<int64_t>(kBytes));
  EXPECT_LT(grown, static_cast<int64_t>(kBytes + (2 << 20)));
  uint32_t sum = 0;
  for (size_t i = 0; i < kBytes / sizeof(uint32_t); i += 1024) sum += block[i];
  block.reset();
  const std::optional<HeapUsage> after = ReadHeapUsage();
  EXPECT_LT(after->allocated_bytes,
            during->allocated_bytes - static_cast<int64_t>(kBytes) + (2 << 20))
      << "checksum " << sum;
}

TEST(ProcessTelemetryTest, CpuSecondsCountWorkDone) {
  const ProcessTelemetry telemetry;
  const double before = Sample(telemetry).at("process_cpu_seconds_total");
  // 300 ms of CPU on this thread (clock() is process CPU time).
  const std::clock_t start = std::clock();
  volatile double sink = 0;
  while (std::clock() - start < CLOCKS_PER_SEC * 3 / 10) sink = sink + 1;
  const double after = Sample(telemetry).at("process_cpu_seconds_total");
  EXPECT_GE(after - before, 0.25);
  EXPECT_LT(after - before, 10.0);
}

}  // namespace
}  // namespace normsvc::server::testing
