#include "report.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace normsvc::normload {
namespace {

std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string Number(double value) { return absl::StrFormat("%.6g", value); }

std::string CodeName(int code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

std::string MethodsJson(const uint64_t* ok, const uint64_t* errors) {
  std::vector<std::string> parts;
  for (int m = 0; m < kMethodCount; ++m) {
    if (ok[m] == 0 && errors[m] == 0) continue;
    parts.push_back(
        absl::StrCat(Quote(MethodName(m)), ": {\"ok\": ", ok[m], ", \"errors\": ", errors[m], "}"));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

std::string PhaseJson(const PhaseResult& phase, double seconds) {
  std::vector<std::string> codes;
  for (int c = 0; c < 17; ++c) {
    if (phase.errors_by_code[c] > 0)
      codes.push_back(absl::StrCat(Quote(CodeName(c)), ": ", phase.errors_by_code[c]));
  }
  const double s = seconds > 0 ? seconds : 1;
  const HistogramSnapshot& h = phase.latency;
  return absl::StrCat(
      "{\"requests\": ", phase.ok + phase.errors, ", \"ok\": ", phase.ok,
      ", \"errors\": ", phase.errors, ", \"errors_by_code\": {", absl::StrJoin(codes, ", "),
      "}, \"rows\": ", phase.rows, ", \"bytes_sent\": ", phase.bytes_sent,
      ", \"bytes_received\": ", phase.bytes_received, ", \"seconds\": ", Number(seconds),
      ", \"req_per_s\": ", Number(phase.ok / s), ", \"rows_per_s\": ", Number(phase.rows / s),
      ", \"gb_per_s\": ", Number((phase.bytes_sent + phase.bytes_received) / s / 1e9),
      ", \"latency_ms\": {\"min\": ", Number(h.min() / 1e6), ", \"mean\": ", Number(h.mean() / 1e6),
      ", \"p50\": ", Number(h.Percentile(0.5) / 1e6),
      ", \"p90\": ", Number(h.Percentile(0.9) / 1e6),
      ", \"p99\": ", Number(h.Percentile(0.99) / 1e6),
      ", \"p999\": ", Number(h.Percentile(0.999) / 1e6), ", \"max\": ", Number(h.max() / 1e6),
      "}, \"verified\": ", phase.verified, ", \"verify_failures\": ", phase.verify_failures,
      ", \"by_method\": ", MethodsJson(phase.method_ok, phase.method_errors), "}");
}

}  // namespace

std::string RunToJson(const RunDescription& d, const RunResult& r) {
  std::vector<std::string> mix;
  for (const PreparedKind& kind : *d.kinds) mix.push_back(Quote(DescribeKind(kind.kind)));
  uint64_t ok[kMethodCount], errors[kMethodCount];
  for (int m = 0; m < kMethodCount; ++m) {
    ok[m] = r.warmup.method_ok[m] + r.measured.method_ok[m];
    errors[m] = r.warmup.method_errors[m] + r.measured.method_errors[m];
  }
  const bool open = d.engine.mode == LoopMode::kOpen;
  return absl::StrCat(
      "{\"schema\": \"normload/v1\", \"target\": ", Quote(d.target),
      ", \"mode\": ", open ? "\"open\"" : "\"closed\"",
      ", \"concurrency\": ", open ? d.engine.max_in_flight : d.engine.concurrency,
      ", \"rate\": ", open ? Number(d.engine.rate) : "null", ", \"channels\": ", d.channels,
      ", \"streams_per_channel\": ", d.engine.streams_per_channel,
      ", \"stream_rotate_ms\": ", d.engine.stream_rotate_ms,
      ", \"warmup_s\": ", Number(d.engine.warmup_s),
      ", \"duration_s\": ", Number(d.engine.duration_s),
      ", \"deadline_ms\": ", d.engine.deadline_ms, ", \"seed\": ", d.engine.seed,
      ", \"echo\": ", d.engine.echo ? "true" : "false",
      ", \"verify\": ", d.engine.verify ? "true" : "false",
      ", \"server\": {\"backend\": ", Quote(d.server_backend),
      ", \"version\": ", Quote(d.server_version), "}, \"mix\": [", absl::StrJoin(mix, ", "),
      "], \"measured\": ", PhaseJson(r.measured, r.measured_seconds),
      ", \"warmup\": ", PhaseJson(r.warmup, d.engine.warmup_s),
      ", \"totals\": {\"ok\": ", r.warmup.ok + r.measured.ok,
      ", \"errors\": ", r.warmup.errors + r.measured.errors,
      ", \"by_method\": ", MethodsJson(ok, errors),
      "}, \"open_loop\": {\"max_send_lag_ms\": ", Number(r.max_send_lag_s * 1e3),
      ", \"late_sends\": ", r.late_sends, ", \"not_sent\": ", r.not_sent,
      "}, \"streams\": {\"reopened\": ", r.streams_reopened, ", \"lost\": ", r.streams_lost,
      ", \"rotated\": ", r.streams_rotated, "}, \"abandoned\": ", r.abandoned,
      ", \"first_error\": ", Quote(r.first_error),
      ", \"first_verify_failure\": ", Quote(r.first_verify_failure), "}");
}

void PrintReport(std::FILE* out, const RunDescription& d, const RunResult& r) {
  const PhaseResult& m = r.measured;
  const double s = r.measured_seconds > 0 ? r.measured_seconds : 1;
  const HistogramSnapshot& h = m.latency;
  std::fprintf(out, "target %s (%s), %s loop, %s, %d channel(s), %.1f s after %.1f s warm-up\n",
               d.target.c_str(), d.server_backend.c_str(),
               d.engine.mode == LoopMode::kOpen ? "open" : "closed",
               d.engine.mode == LoopMode::kOpen
                   ? absl::StrCat(Number(d.engine.rate), " req/s Poisson").c_str()
                   : absl::StrCat(d.engine.concurrency, " in flight").c_str(),
               d.channels, d.engine.duration_s, d.engine.warmup_s);
  for (const PreparedKind& kind : *d.kinds)
    std::fprintf(out, "  mix: %s\n", DescribeKind(kind.kind).c_str());
  std::fprintf(out, "throughput  %.0f req/s   %.0f rows/s   %.3f GB/s (in+out) over %.3f s\n",
               m.ok / s, m.rows / s, (m.bytes_sent + m.bytes_received) / s / 1e9, s);
  std::fprintf(out, "latency ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (mean %.3f)\n",
               h.Percentile(0.5) / 1e6, h.Percentile(0.9) / 1e6, h.Percentile(0.99) / 1e6,
               h.Percentile(0.999) / 1e6, h.max() / 1e6, h.mean() / 1e6);
  std::fprintf(out,
               "requests    %llu ok, %llu errors (measured); %llu ok, %llu errors in warm-up\n",
               static_cast<unsigned long long>(m.ok), static_cast<unsigned long long>(m.errors),
               static_cast<unsigned long long>(r.warmup.ok),
               static_cast<unsigned long long>(r.warmup.errors));
  for (int c = 0; c < 17; ++c) {
    const uint64_t count = m.errors_by_code[c] + r.warmup.errors_by_code[c];
    if (count > 0)
      std::fprintf(out, "  %-20s %llu\n", CodeName(c).c_str(),
                   static_cast<unsigned long long>(count));
  }
  if (!r.first_error.empty()) std::fprintf(out, "first error: %s\n", r.first_error.c_str());
  if (d.engine.verify) {
    std::fprintf(out, "verified    %llu responses, %llu mismatches\n",
                 static_cast<unsigned long long>(m.verified + r.warmup.verified),
                 static_cast<unsigned long long>(m.verify_failures + r.warmup.verify_failures));
    if (!r.first_verify_failure.empty())
      std::fprintf(out, "first mismatch: %s\n", r.first_verify_failure.c_str());
  }
  if (d.engine.mode == LoopMode::kOpen) {
    std::fprintf(out, "sender      max lag %.3f ms, %llu sends > 1 ms late\n",
                 r.max_send_lag_s * 1e3, static_cast<unsigned long long>(r.late_sends));
    if (r.not_sent > 0) {
      std::fprintf(out, "not sent    %llu arrivals (all %d in flight until the window closed)\n",
                   static_cast<unsigned long long>(r.not_sent), d.engine.max_in_flight);
    }
  }
  if (r.streams_reopened + r.streams_lost + r.streams_rotated > 0) {
    std::fprintf(out,
                 "streams     %llu reopened after they ended, %llu could not be, %llu retired "
                 "by age\n",
                 static_cast<unsigned long long>(r.streams_reopened),
                 static_cast<unsigned long long>(r.streams_lost),
                 static_cast<unsigned long long>(r.streams_rotated));
  }
  if (r.abandoned > 0) {
    std::fprintf(out, "abandoned   %llu requests unanswered after the deadline\n",
                 static_cast<unsigned long long>(r.abandoned));
  }
}

std::string SweepCsvHeader(const std::string& swept) {
  return swept + ",req_per_s,rows_per_s,gb_per_s,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,ok,errors\n";
}

std::string SweepCsvRow(double value, const RunResult& r) {
  const PhaseResult& m = r.measured;
  const double s = r.measured_seconds > 0 ? r.measured_seconds : 1;
  const HistogramSnapshot& h = m.latency;
  return absl::StrCat(Number(value), ",", Number(m.ok / s), ",", Number(m.rows / s), ",",
                      Number((m.bytes_sent + m.bytes_received) / s / 1e9), ",",
                      Number(h.Percentile(0.5) / 1e6), ",", Number(h.Percentile(0.9) / 1e6), ",",
                      Number(h.Percentile(0.99) / 1e6), ",", Number(h.Percentile(0.999) / 1e6), ",",
                      Number(h.max() / 1e6), ",", m.ok, ",", m.errors, "\n");
}

}  // namespace normsvc::normload
