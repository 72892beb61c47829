// NormalizeStream clients for the soak test. Each client thread opens
// streams one after another until the end of the load; a stream carries
// valid and malformed requests, a few in flight at a time, and either
// completes (half-close, every request answered exactly once, final status
// OK) or disconnects mid-stream (the client cancels with requests still
// unanswered: final status CANCELLED, the unanswered ones are counted as
// abandoned). Every OK response is verified.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "soak_tally.h"
#include "soak_workload.h"

namespace normsvc::soak {

struct StreamClientOptions {
  int min_requests = 10;  // per stream
  int max_requests = 80;
  int max_in_flight = 8;          // per stream
  double disconnect_share = 0.5;  // streams that end by a client cancel
  double malformed_share = 0.1;   // requests on a stream that are malformed
};

// Runs one client until `until` or `*stop`; returns when its last stream
// has ended.
void RunStreamClient(const Workload& workload, v1::Normalizer::Stub* stub, Tally* tally,
                     const StreamClientOptions& options, uint64_t seed,
                     std::chrono::steady_clock::time_point until, const std::atomic<bool>* stop);

}  // namespace normsvc::soak
