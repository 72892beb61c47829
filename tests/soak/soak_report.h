// The soak test's report: a table on stdout and the same figures as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "soak_tally.h"

namespace normsvc::soak {

struct Check {
  std::string name;
  bool passed = false;
  std::string detail;
};

struct SoakReport {
  uint64_t seed = 0;
  double capacity_rps = 0;     // closed loop, OK responses per second
  double offered_rps = 0;      // open loop target
  double achieved_rps = 0;     // open loop arrivals actually sent
  uint64_t late_arrivals = 0;  // arrivals the client could not send on time
  double duration_s = 0;       // open loop length (warm-up included)
  double warmup_s = 0;
  int stream_clients = 0;
  int64_t rss_start_bytes = 0;  // before any load
  int64_t rss_warm_bytes = 0;   // at the end of the warm-up
  int64_t rss_end_bytes = 0;    // at the end of the load
  // The anonymous and file-backed parts of the two readings above.
  int64_t rss_anon_warm_bytes = 0, rss_anon_end_bytes = 0;
  int64_t rss_file_warm_bytes = 0, rss_file_end_bytes = 0;
  int64_t rss_peak_bytes = 0;
  // The server's live heap allocations (normsvc_heap_allocated_bytes) with
  // the server idle: before any load, after the warm-up, at the end.
  int64_t heap_start_bytes = -1;
  int64_t heap_warm_bytes = -1;
  int64_t heap_end_bytes = -1;
  std::vector<std::pair<double, int64_t>> rss_trace;  // (seconds into the load, bytes)
  double server_ok = -1;  // normsvc_requests_total{code="OK"} at the end
  int server_exit_code = -1;
  std::vector<Check> checks;

  bool passed() const;
};

// Relative growth from the reading after the warm-up to the one at the end
// (0 when there is no reading after the warm-up).
double RssGrowth(const SoakReport& report);
double HeapGrowth(const SoakReport& report);

void PrintReport(const SoakReport& report, const Tally& tally);
bool WriteJsonReport(const std::string& path, const SoakReport& report, const Tally& tally);

}  // namespace normsvc::soak
