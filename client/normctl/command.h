// normctl's subcommands and the conventions they share: exit codes and how
// errors are printed.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "args.h"
#include "normsvc/client/client.h"

namespace normsvc::normctl {

// Exit codes (documented in `normctl --help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,     // unexpected failure inside normctl
  kExitUsage = 2,        // bad command line
  kExitFile = 3,         // a .npy file could not be read, parsed or written
  kExitRejected = 4,     // the server answered an error status
  kExitUnreachable = 5,  // UNAVAILABLE or DEADLINE_EXCEEDED: no answer from the server
  kExitNotServing = 6,   // health: the server answered, but not SERVING
};

// What every subcommand gets: a connected client and per-call options.
struct Session {
  client::NormalizerClient* client = nullptr;
  client::CallOptions call;
};

// Prints "normctl: CODE_NAME: message" on stderr and returns the exit code
// for a status the server (or gRPC) returned.
int ReportRpcError(const absl::Status& status);
// Prints "normctl: message" and returns `code` (for local errors).
int ReportError(int code, const absl::Status& status);

int RunNormalize(cli::Args& args, const Session& session);
int RunBackward(cli::Args& args, const Session& session);
int RunParams(cli::Args& args, const Session& session);
int RunInfo(cli::Args& args, const Session& session);
int RunHealth(cli::Args& args, const Session& session);

}  // namespace normsvc::normctl
