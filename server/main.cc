// normsvc: the LayerNorm/RMSNorm gRPC service.
//
// SIGTERM or SIGINT starts a graceful stop (Server::Stop): health goes
// NOT_SERVING, new requests get UNAVAILABLE, accepted ones complete, and
// the process exits 0. Start-up errors exit 1; bad flags exit 2. A stop
// that overruns --drain_timeout_s by kStopOverrunLimit (a batch hung on a
// device), or a second SIGTERM or SIGINT during the stop, exits 3 at once.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <malloc.h>
#include <pthread.h>

#include "absl/synchronization/mutex.h"

#include "server/build_info.h"
#include "server/gpu_backend.h"
#include "server/log.h"
#include "server/options.h"
#include "server/server.h"
#include "server/stop_watchdog.h"

namespace {

// Process-wide settings for serving load:
// - Abseil's mutex deadlock detection (on in the distribution's build) costs
//   a lock-graph update per acquisition; the batcher locks per request.
// - Keep freed request and response buffers in the heap instead of
//   returning them to the kernel after each request (mmap/munmap of
//   multi-megabyte buffers per request); the server's memory stays bounded
//   by its limits either way.
// Whether the environment sets glibc malloc tunables (GLIBC_TUNABLES with
// glibc.malloc.*, or the MALLOC_*_ variables): those win over the defaults
// below.
bool EnvironmentTunesMalloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return true;
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

void TuneProcessForServing() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (EnvironmentTunesMalloc()) return;
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace normsvc::server;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<CommandLine> command_line = ParseCommandLine(args, ProcessEnvironment());
  if (!command_line.ok()) {
    std::fprintf(stderr, "normsvc: %s\n", std::string(command_line.status().message()).c_str());
    return 2;
  }
  if (command_line->action == CommandLine::Action::kHelp) {
    std::fputs(command_line->text.c_str(), stdout);
    return 0;
  }
  if (command_line->action == CommandLine::Action::kVersion) {
    std::printf("normsvc %s (git %s, cuda %s)\n", NORMSVC_VERSION, GitCommit(),
                CudaRuntimeVersion().c_str());
    return 0;
  }

  TuneProcessForServing();

  // Block the handled signals in every thread (threads inherit the mask), so
  // that only sigwait below receives them: SIGTERM and SIGINT drain and stop,
  // SIGUSR1 gives freed heap memory back to the system now.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = std::make_unique<Server>(command_line->options);
  if (absl::Status status = server->Start(); !status.ok()) {
    Log(LogLevel::kError, "could not start: ", status.message());
    return 1;
  }
  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) == 0 && signal_number == SIGUSR1) {
    server->ReleaseFreeHeapNow();  // logs and counts what it gave back
  }
  Log(LogLevel::kInfo, "received signal ", signal_number,
      ", draining (a second SIGTERM or SIGINT stops at once)");
  sigset_t second_stop_signals;
  sigemptyset(&second_stop_signals);
  sigaddset(&second_stop_signals, SIGTERM);
  sigaddset(&second_stop_signals, SIGINT);
  const absl::Duration stop_limit =
      absl::Seconds(command_line->options.drain_timeout_s) + kStopOverrunLimit;
  {
    // The watch covers the Server's destruction too (executors release
    // device memory and streams there).
    StopWatchdog watchdog(
        stop_limit, second_stop_signals, [stop_limit](StopWatchdog::Reason reason, int signal) {
          if (reason == StopWatchdog::Reason::kSecondSignal) {
            Log(LogLevel::kError, "received signal ", signal,
                " while stopping: exiting without waiting for the stop");
          } else {
            Log(LogLevel::kError, "the stop did not finish within ",
                absl::FormatDuration(stop_limit),
                " (a batch may be hung on a device): exiting without waiting for it");
          }
          std::_Exit(3);
        });
    // Requests still open at the drain timeout were cancelled; that is still
    // an orderly stop, so the exit status is 0 either way.
    server->Stop();
    server.reset();
  }
  return 0;
}
