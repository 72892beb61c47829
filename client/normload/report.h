// normload's results: the text report, the JSON document and sweep CSV.
//
// JSON (schema "normload/v1"), one object per run:
//   schema, target, mode ("closed"|"open"), concurrency (closed loop: requests
//   in flight; open loop: the in-flight cap), rate (req/s, open loop, else
//   null), channels, streams_per_channel, stream_rotate_ms, warmup_s,
//   duration_s, deadline_ms,
//   seed, echo, verify, server {backend, version}, mix [kind strings],
//   measured PHASE, warmup PHASE,
//   totals {ok, errors, by_method {Normalize|NormalizeStream|NormalizeBackward:
//           {ok, errors}}}   (warm-up + measurement: what the server counted,
//           unless a call was cut off after the server answered it),
//   open_loop {max_send_lag_ms, late_sends, not_sent (arrivals never sent:
//   every slot was busy until the window closed)},
//   streams {reopened, lost, rotated (retired at --stream_rotate_ms)},
//   abandoned, first_error ("CODE_NAME: message"),
//   first_verify_failure
// PHASE: requests, ok, errors, errors_by_code {CODE_NAME: n}, rows,
//   bytes_sent, bytes_received, seconds (measured: the window's start to the
//   later of its end and the last answer to a request sent in it), req_per_s,
//   rows_per_s, gb_per_s
//   ((sent + received tensor bytes) / seconds / 1e9), latency_ms {min, mean,
//   p50, p90, p99, p999, max} (OK requests), verified, verify_failures,
//   by_method {...}.
// A sweep writes {"schema": "normload-sweep/v1", "sweep": "concurrency"|
// "rate", "points": [run objects]}.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "engine.h"
#include "workload.h"

namespace normsvc::normload {

struct RunDescription {
  std::string target;
  EngineOptions engine;
  int channels = 1;
  std::string server_backend;
  std::string server_version;
  std::vector<PreparedKind> const* kinds = nullptr;
};

std::string RunToJson(const RunDescription& description, const RunResult& result);
void PrintReport(std::FILE* out, const RunDescription& description, const RunResult& result);

// CSV header and one row per sweep point.
std::string SweepCsvHeader(const std::string& swept);
std::string SweepCsvRow(double value, const RunResult& result);

}  // namespace normsvc::normload
