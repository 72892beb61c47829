// normsvc: the LayerNorm/RMSNorm gRPC service.
//
// SIGTERM or SIGINT starts a graceful stop (Server::Stop): health goes
// NOT_SERVING, new requests get UNAVAILABLE, accepted ones complete, and
// the process exits 0. Start-up errors exit 1; bad flags exit 2.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include <pthread.h>

#include "server/gpu_backend.h"
#include "server/log.h"
#include "server/options.h"
#include "server/server.h"

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
    std::printf("normsvc %s (git %s, cuda %s)\n", NORMSVC_VERSION, NORMSVC_GIT_COMMIT,
                CudaRuntimeVersion().c_str());
    return 0;
  }

  // Block the stop signals in every thread (threads inherit the mask), so
  // that only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Server server(command_line->options);
  if (absl::Status status = server.Start(); !status.ok()) {
    Log(LogLevel::kError, "could not start: ", status.message());
    return 1;
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  Log(LogLevel::kInfo, "received signal ", signal_number, ", draining");
  // Requests still open at the drain timeout were cancelled; that is still
  // an orderly stop, so the exit status is 0 either way.
  server.Stop();
  return 0;
}
