// Names the calling thread for `top -H`, /proc/PID/task/*/comm, perf and
// debuggers, so a server's CPU can be told apart by role (batch workers,
// reply senders) without a profiler.
#pragma once

#include <string_view>

namespace normsvc::server {

// Linux keeps at most 15 bytes of a name; longer names are cut there.
// Elsewhere, and when the system refuses, it does nothing.
void NameCurrentThread(std::string_view name);

}  // namespace normsvc::server
