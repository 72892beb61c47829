// Process settings for programs that push many RPCs per second (normload and
// the echo baseline), so that both sides of a benchmark pay the same.
#pragma once

namespace normsvc::cli {

// - Abseil's mutex deadlock detection off: Debian's Abseil is built with it
//   on, and gRPC takes absl::Mutex on every call (GraphCycles bookkeeping
//   showed up in profiles of the load generator).
// - malloc keeps freed memory instead of trimming it back to the kernel and
//   serves large message buffers from the heap instead of fresh mmaps, so
//   steady-state traffic does not page-fault on every request.
void TuneProcessForLoad();

}  // namespace normsvc::cli
