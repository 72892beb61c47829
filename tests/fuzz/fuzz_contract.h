// What every fuzz target here checks besides crashes and sanitizer reports:
// a broken contract aborts with what broke, and a rejection carries a
// message. Header-only: each target is one translation unit.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace normsvc::fuzz {

// Aborts (a libFuzzer finding) with `what` when `condition` is false.
inline void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "contract broken: %s\n", what);
    std::abort();
  }
}

// Rejections must name what is wrong. With NORMSVC_FUZZ_PRINT_STATUS set,
// each outcome is printed, e.g. to see which checks a corpus reaches:
//   NORMSVC_FUZZ_PRINT_STATUS=1 ./fuzz_requests -runs=0 corpus | sort | uniq -c
inline void Report(const absl::Status& status) {
  static const bool print = std::getenv("NORMSVC_FUZZ_PRINT_STATUS") != nullptr;
  Require(status.ok() || !status.message().empty(), "an error without a message");
  if (!print) return;
  // The message up to its first digit or quote: the check, without the values.
  const std::string message(status.message());
  std::printf("%s %s\n", absl::StatusCodeToString(status.code()).c_str(),
              message.substr(0, message.find_first_of("0123456789'")).c_str());
}

}  // namespace normsvc::fuzz
