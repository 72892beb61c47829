// Minimal leveled logging to stderr: one line per call, written atomically.
// The level is set once at start-up (--log_level); Log() below the level is
// a cheap comparison.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace normsvc::server {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Parses "debug", "info", "warning" or "error"; false for anything else.
bool ParseLogLevel(absl::string_view text, LogLevel* level);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void WriteLogLine(LogLevel level, absl::string_view message);

template <typename... Args>
void Log(LogLevel level, const Args&... args) {
  if (LogEnabled(level)) WriteLogLine(level, absl::StrCat(args...));
}

}  // namespace normsvc::server
