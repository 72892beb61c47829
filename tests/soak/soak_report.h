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
  int64_t rss_peak_bytes = 0;
  std::vector<std::pair<double, int64_t>> rss_trace;  // (seconds into the load, bytes)
  double server_ok = -1;  // normsvc_requests_total{code="OK"} at the end
  int server_exit_code = -1;
  std::vector<Check> checks;

  bool passed() const;
};

void PrintReport(const SoakReport& report, const Tally& tally);
bool WriteJsonReport(const std::string& path, const SoakReport& report, const Tally& tally);

}  // namespace normsvc::soak
