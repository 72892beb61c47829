#include "soak_report.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "soak_workload.h"

namespace normsvc::soak {
namespace {

double MiB(int64_t bytes) { return bytes / 1048576.0; }

double Growth(int64_t before, int64_t after) {
  return before > 0 ? static_cast<double>(after - before) / before : 0;
}

std::string Escape(const std::string& text) {
  std::string out;
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
  return out;
}

// Codes any category saw, in code order.
std::vector<int> SeenCodes(const Tally& tally) {
  std::vector<int> codes;
  for (int code = 0; code < kCodeCount; ++code) {
    if (tally.total_code(code) > 0) codes.push_back(code);
  }
  return codes;
}

}  // namespace

double RssGrowth(const SoakReport& report) {
  return Growth(report.rss_warm_bytes, report.rss_end_bytes);
}
double HeapGrowth(const SoakReport& report) {
  return Growth(report.heap_warm_bytes, report.heap_end_bytes);
}

bool SoakReport::passed() const {
  for (const Check& check : checks) {
    if (!check.passed) return false;
  }
  return true;
}

void PrintReport(const SoakReport& r, const Tally& tally) {
  std::printf(
      "normsvc soak: capacity %.0f req/s (closed loop); open loop at %.0f req/s "
      "(sent %.0f req/s, %llu late) for %.0f s (%.0f s warm-up), %d stream clients\n\n",
      r.capacity_rps, r.offered_rps, r.achieved_rps,
      static_cast<unsigned long long>(r.late_arrivals), r.duration_s, r.warmup_s, r.stream_clients);
  const std::vector<int> codes = SeenCodes(tally);
  std::printf("%-18s %9s", "request", "sent");
  for (int code : codes)
    std::printf(" %*s", std::max<int>(9, CodeName(code).size()), CodeName(code).c_str());
  std::printf("\n");
  for (int category = 0; category < kCategoryCount; ++category) {
    std::printf("%-18s %9llu", CategoryName(category),
                static_cast<unsigned long long>(tally.sent(category)));
    for (int code : codes) {
      std::printf(" %*llu", std::max<int>(9, CodeName(code).size()),
                  static_cast<unsigned long long>(tally.count(category, code)));
    }
    std::printf("\n");
  }
  std::printf("%-18s %9llu", "total", static_cast<unsigned long long>(tally.total_sent()));
  for (int code : codes) {
    std::printf(" %*llu", std::max<int>(9, CodeName(code).size()),
                static_cast<unsigned long long>(tally.total_code(code)));
  }
  std::printf("\n\n");
  std::printf(
      "wrong results %llu, lost %llu, second statuses %llu, unexpected codes %llu, "
      "other failures %llu\n",
      static_cast<unsigned long long>(tally.wrong()), static_cast<unsigned long long>(tally.lost()),
      static_cast<unsigned long long>(tally.duplicates()),
      static_cast<unsigned long long>(tally.unexpected()),
      static_cast<unsigned long long>(tally.failures()));
  std::printf("streams: %llu completed, %llu disconnected mid-stream (%llu requests abandoned)\n",
              static_cast<unsigned long long>(tally.streams_completed()),
              static_cast<unsigned long long>(tally.streams_disconnected()),
              static_cast<unsigned long long>(tally.abandoned()));
  std::printf("OK unary latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%llu requests)\n",
              tally.OkLatencyQuantile(0.5), tally.OkLatencyQuantile(0.99),
              tally.OkLatencyQuantile(1.0),
              static_cast<unsigned long long>(tally.ok_latency_count()));
  std::printf(
      "server VmRSS: start %.1f MiB, after warm-up %.1f MiB, end %.1f MiB "
      "(growth %+.2f%%), peak %.1f MiB\n",
      MiB(r.rss_start_bytes), MiB(r.rss_warm_bytes), MiB(r.rss_end_bytes), 100 * RssGrowth(r),
      MiB(r.rss_peak_bytes));
  std::printf("  of which anonymous %.1f -> %.1f MiB, file-backed %.1f -> %.1f MiB\n",
              MiB(r.rss_anon_warm_bytes), MiB(r.rss_anon_end_bytes), MiB(r.rss_file_warm_bytes),
              MiB(r.rss_file_end_bytes));
  std::printf(
      "server heap allocated (idle): start %.1f MiB, after warm-up %.1f MiB, end %.1f MiB "
      "(growth %+.2f%%)\n",
      MiB(r.heap_start_bytes), MiB(r.heap_warm_bytes), MiB(r.heap_end_bytes), 100 * HeapGrowth(r));
  std::printf("server: %.0f OK (its own count), exit status %d after SIGTERM\n\n", r.server_ok,
              r.server_exit_code);
  for (const Check& check : r.checks) {
    std::printf("%s  %s%s%s\n", check.passed ? "PASS" : "FAIL", check.name.c_str(),
                check.detail.empty() ? "" : ": ", check.detail.c_str());
  }
  for (const std::string& message : tally.messages()) std::printf("  %s\n", message.c_str());
  std::printf("\nsoak %s (seed %llu)\n", r.passed() ? "PASSED" : "FAILED",
              static_cast<unsigned long long>(r.seed));
  std::fflush(stdout);
}

bool WriteJsonReport(const std::string& path, const SoakReport& r, const Tally& tally) {
  std::vector<std::string> categories;
  for (int category = 0; category < kCategoryCount; ++category) {
    std::vector<std::string> codes;
    for (int code = 0; code < kCodeCount; ++code) {
      if (tally.count(category, code) > 0) {
        codes.push_back(absl::StrCat("\"", CodeName(code), "\": ", tally.count(category, code)));
      }
    }
    categories.push_back(absl::StrCat("\"", CategoryName(category),
                                      "\": {\"sent\": ", tally.sent(category), ", \"codes\": {",
                                      absl::StrJoin(codes, ", "), "}}"));
  }
  std::vector<std::string> totals, rejected, trace, checks, messages;
  for (int code : SeenCodes(tally)) {
    const std::string entry = absl::StrCat("\"", CodeName(code), "\": ", tally.total_code(code));
    totals.push_back(entry);
    if (code != 0) rejected.push_back(entry);
  }
  for (const auto& [seconds, bytes] : r.rss_trace) {
    trace.push_back(absl::StrFormat("[%.1f, %d]", seconds, bytes));
  }
  for (const Check& check : r.checks) {
    checks.push_back(absl::StrCat("{\"name\": \"", Escape(check.name),
                                  "\", \"passed\": ", check.passed ? "true" : "false",
                                  ", \"detail\": \"", Escape(check.detail), "\"}"));
  }
  for (const std::string& message : tally.messages()) {
    messages.push_back(absl::StrCat("\"", Escape(message), "\""));
  }
  std::ofstream out(path);
  out << "{\n"
      << absl::StrFormat("  \"passed\": %s,\n  \"seed\": %d,\n", r.passed() ? "true" : "false",
                         r.seed)
      << absl::StrFormat(
             "  \"capacity_rps\": %.1f,\n  \"offered_rps\": %.1f,\n  \"achieved_rps\": %.1f,\n"
             "  \"late_arrivals\": %d,\n  \"duration_s\": %.1f,\n  \"warmup_s\": %.1f,\n"
             "  \"stream_clients\": %d,\n",
             r.capacity_rps, r.offered_rps, r.achieved_rps, r.late_arrivals, r.duration_s,
             r.warmup_s, r.stream_clients)
      << "  \"requests_sent\": " << tally.total_sent() << ",\n"
      << "  \"ok\": " << tally.total_code(0) << ",\n"
      << "  \"rejected_by_code\": {" << absl::StrJoin(rejected, ", ") << "},\n"
      << "  \"codes\": {" << absl::StrJoin(totals, ", ") << "},\n"
      << "  \"by_category\": {" << absl::StrJoin(categories, ", ") << "},\n"
      << "  \"wrong_results\": " << tally.wrong() << ",\n"
      << "  \"lost\": " << tally.lost() << ",\n"
      << "  \"second_statuses\": " << tally.duplicates() << ",\n"
      << "  \"unexpected_codes\": " << tally.unexpected() << ",\n"
      << "  \"other_failures\": " << tally.failures() << ",\n"
      << "  \"streams_completed\": " << tally.streams_completed() << ",\n"
      << "  \"streams_disconnected\": " << tally.streams_disconnected() << ",\n"
      << "  \"stream_requests_abandoned\": " << tally.abandoned() << ",\n"
      << absl::StrFormat(
             "  \"ok_latency_ms\": {\"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f, \"count\": %d},\n",
             tally.OkLatencyQuantile(0.5), tally.OkLatencyQuantile(0.99),
             tally.OkLatencyQuantile(1.0), tally.ok_latency_count())
      << absl::StrFormat(
             "  \"server_rss_bytes\": {\"start\": %d, \"after_warmup\": %d, \"end\": %d, "
             "\"peak\": %d, \"growth\": %.5f, \"anon_after_warmup\": %d, \"anon_end\": %d, "
             "\"file_after_warmup\": %d, \"file_end\": %d},\n",
             r.rss_start_bytes, r.rss_warm_bytes, r.rss_end_bytes, r.rss_peak_bytes, RssGrowth(r),
             r.rss_anon_warm_bytes, r.rss_anon_end_bytes, r.rss_file_warm_bytes,
             r.rss_file_end_bytes)
      << absl::StrFormat(
             "  \"server_heap_allocated_bytes\": {\"start\": %d, \"after_warmup\": %d, "
             "\"end\": %d, \"growth\": %.5f},\n",
             r.heap_start_bytes, r.heap_warm_bytes, r.heap_end_bytes, HeapGrowth(r))
      << "  \"rss_trace\": [" << absl::StrJoin(trace, ", ") << "],\n"
      << absl::StrFormat("  \"server_ok\": %.0f,\n  \"server_exit_code\": %d,\n", r.server_ok,
                         r.server_exit_code)
      << "  \"checks\": [" << absl::StrJoin(checks, ",\n    ") << "],\n"
      << "  \"messages\": [" << absl::StrJoin(messages, ",\n    ") << "]\n"
      << "}\n";
  return static_cast<bool>(out);
}

}  // namespace normsvc::soak
