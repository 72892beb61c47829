// The normsvc process the soak test drives: started on free loopback ports
// (gRPC and metrics), its resident memory read from /proc, its metrics
// scraped, and stopped with SIGTERM (a drain).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "test_process.h"

namespace normsvc::soak {

class ServerUnderTest {
 public:
  // Starts `binary` with `flags` plus the listen addresses, and `environment`
  // ("NAME=value") added to its environment; ready() says whether it
  // accepted connections within 30 s.
  ServerUnderTest(const std::string& binary, const std::vector<std::string>& flags,
                  const std::vector<std::string>& environment, const std::string& log_path);
  bool ready() const { return ready_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(grpc_port_); }

  // A kB field of /proc/<pid>/status in bytes (VmRSS: the resident set;
  // RssAnon, RssFile: its anonymous and file-backed parts); 0 when it cannot
  // be read.
  int64_t ResidentBytes(const std::string& field = "VmRSS") const;
  // Copies /proc/<pid>/smaps (every mapping with its resident size) to
  // `path`; false when it cannot.
  bool SaveSmaps(const std::string& path) const;
  // Asks the server to give freed heap memory back now (SIGUSR1) and waits,
  // at most 5 s, until normsvc_heap_releases_total says it did; false when
  // it did not.
  bool ReleaseFreeHeap() const;
  // The /metrics text ("" on failure).
  std::string Metrics() const;
  // SIGTERM, then the exit status (128 + signal when killed after `timeout`).
  int Stop(std::chrono::milliseconds timeout);
  std::string Log() const { return process_->Log(); }

 private:
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  bool ready_ = false;
  std::unique_ptr<testing::ChildProcess> process_;
};

// Sum of every sample of `family` in a Prometheus text exposition whose
// labels include all of `labels` (e.g. {"code=\"OK\""}); -1 when none.
double SumSeries(const std::string& exposition, const std::string& family,
                 const std::vector<std::string>& labels = {});

// What of a server log a failed run prints, at most `max_lines` lines: the
// sanitizer reports in it (from a "==pid==WARNING:" or "==pid==ERROR:" line
// to its "SUMMARY:" line) when there are any, else its last lines.
std::string LogExcerpt(const std::string& log, int max_lines);

}  // namespace normsvc::soak
