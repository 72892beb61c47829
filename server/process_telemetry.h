// Process telemetry sampled at scrape time: the standard Prometheus process
// series (process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_start_time_seconds)
// from /proc/self, plus process_threads and the heap the allocator reports:
//   normsvc_heap_allocated_bytes  bytes in live allocations (what the server
//                                 holds; a leak makes it grow);
//   normsvc_heap_free_bytes       freed bytes the allocator keeps mapped
//                                 (resident memory minus the first, roughly,
//                                 for the heap's part).
// Resident memory alone cannot tell a leak from a heap that keeps its
// high-water mark; the two heap series can. The heap figures come from
// glibc's mallinfo2, or from the sanitizer's allocator in sanitizer builds;
// where neither exists they are absent. On systems without /proc the
// /proc series are absent.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace normsvc::server {

struct HeapUsage {
  int64_t allocated_bytes = 0;
  int64_t free_bytes = 0;  // 0 where the allocator does not say
};

// The heap as the allocator sees it now; nullopt where it cannot say.
std::optional<HeapUsage> ReadHeapUsage();

// Resident memory of this process (/proc/self/stat); nullopt without /proc.
std::optional<int64_t> ReadResidentBytes();

class ProcessTelemetry final : public prometheus::Collectable {
 public:
  ProcessTelemetry();
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  double start_time_seconds_;
};

}  // namespace normsvc::server
