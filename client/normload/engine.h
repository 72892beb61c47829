// The load engine: drives prepared requests over several channels with the
// gRPC callback API, closed loop (a fixed number of requests in flight) or
// open loop (Poisson arrivals at a target rate), and counts what comes back.
//
// Efficiency: requests are built once (workload.h) and sent by pointer;
// each in-flight slot owns its response message, reused across calls, so a
// request costs one ClientContext and no payload allocation. Completions
// run on gRPC's threads and issue the slot's next request directly.
//
// Timing: every latency is measured from the request's intended send time:
// in the open loop that is its scheduled arrival, so a server (or client)
// that falls behind shows up as latency instead of as fewer requests.
// Requests belong to the phase (warm-up or measurement) in which they are
// actually sent. Nothing is sent after the measurement window: open-loop
// arrivals still waiting for a free slot then are counted as not sent.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "histogram.h"
#include "workload.h"

namespace normsvc::normload {

enum class LoopMode { kClosed, kOpen };

struct EngineOptions {
  LoopMode mode = LoopMode::kClosed;
  int concurrency = 64;              // closed loop: requests in flight
  double rate = 1000;                // open loop: requests per second
  int max_in_flight = 4096;          // open loop: in-flight cap (then sends wait)
  int sender_threads = 2;            // open loop: threads scheduling arrivals
  int streams_per_channel = 1;       // NormalizeStream calls per channel (stream kinds)
  int64_t stream_rotate_ms = 10000;  // a stream this old is replaced (StreamPool); 0: never
  double warmup_s = 2;
  double duration_s = 10;
  int64_t deadline_ms = 10000;  // per unary call
  bool verify = false;
  bool echo = false;
  bool progress = true;  // a line per second on stderr
  uint64_t seed = 1;
};

// Methods counted separately (the server's metrics label them so).
enum MethodIndex {
  kMethodNormalize = 0,
  kMethodNormalizeStream = 1,
  kMethodBackward = 2,
  kMethodCount = 3
};
const char* MethodName(int method);

// Counts of one phase, copied out of the engine.
struct PhaseResult {
  uint64_t ok = 0;
  uint64_t errors = 0;
  uint64_t errors_by_code[17] = {};
  uint64_t method_ok[kMethodCount] = {};
  uint64_t method_errors[kMethodCount] = {};
  uint64_t rows = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t verified = 0;
  uint64_t verify_failures = 0;
  HistogramSnapshot latency;  // OK requests, nanoseconds
};

struct RunResult {
  PhaseResult warmup;
  PhaseResult measured;
  // From the window's start to the later of its end and the last answer to
  // a request sent in it: rates divide by this.
  double measured_seconds = 0;
  double max_send_lag_s = 0;  // open loop: worst lateness of an actual send
  uint64_t late_sends = 0;    // open loop: sends more than 1 ms behind schedule
  // Open loop: arrivals never sent, because every slot (--max_in_flight)
  // was busy until the window closed.
  uint64_t not_sent = 0;
  uint64_t streams_reopened = 0;  // NormalizeStream calls replaced after they ended
  uint64_t streams_rotated = 0;   // NormalizeStream calls retired at --stream_rotate_ms
  uint64_t streams_lost = 0;      // streams that ended and could not be replaced
  uint64_t abandoned = 0;         // requests cancelled after the drain timeout
  std::string first_verify_failure;
  std::string first_error;  // "CODE_NAME: message" of the first failed request
};

// Runs one load: warm-up, measurement, then waits for every request in
// flight. `channels` are used round-robin by the slots.
RunResult RunLoad(const EngineOptions& options, const std::vector<PreparedKind>& kinds,
                  const std::vector<std::shared_ptr<grpc::Channel>>& channels);

}  // namespace normsvc::normload
