// What the RPC handlers share: limits, the routing entry point, parameter
// store, metrics, the control thread and the drain gate. Owned by Server;
// outlives every call.
#pragma once

#include <chrono>
#include <cstdint>

#include "absl/time/time.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/call_registry.h"
#include "server/control_queue.h"
#include "server/drain_gate.h"
#include "server/executor_pool.h"
#include "server/metrics.h"
#include "server/parameter_store.h"
#include "server/validation.h"

namespace normsvc::server {

struct ServiceContext {
  RequestLimits limits;
  int64_t max_stream_in_flight = 256;
  // A NormalizeStream stops reading while its requests and replies not yet
  // written hold this many bytes of --max_queued_bytes (1 / kStreamShare of
  // it), so that a client that reads slowly holds up its own stream (HTTP/2
  // flow control pushes back on it) rather than the whole server's budget.
  int64_t max_stream_bytes = int64_t{1} << 28;
  ExecutorPool* pool = nullptr;
  ParameterStore* store = nullptr;
  ServiceMetrics* metrics = nullptr;
  ControlQueue* control = nullptr;
  DrainGate* gate = nullptr;
  CallRegistry* streams = nullptr;        // open NormalizeStream calls
  v1::GetServerInfoResponse server_info;  // fixed at start-up
};

// A gRPC deadline as absl::Time; no deadline is InfiniteFuture.
inline absl::Time DeadlineOf(std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

inline double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// One NormalizeStream holds at most about 1 / kStreamShare of
// --max_queued_bytes (ServiceContext::max_stream_bytes).
inline constexpr int64_t kStreamShare = 4;

inline absl::Status ShuttingDown() { return absl::UnavailableError("server is shutting down"); }

}  // namespace normsvc::server
