// normctl: command-line client of normsvc. See kUsage.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "channel_flags.h"
#include "command.h"

namespace normsvc::normctl {
namespace {

constexpr char kUsage[] = R"(normctl: command-line client of the normsvc normalization service.

usage: normctl COMMAND [flags]

commands:
  normalize   LayerNorm/RMSNorm forward of a .npy tensor
      --op layernorm|rmsnorm   (required)
      --in x.npy               input; normalized over its last dimension (required)
      --out y.npy              output (required)
      --dtype fp32|fp16|bf16   send the input (and residual) in this dtype
                               (default: the file's dtype; float64 files go as fp32)
      --out_dtype fp32|fp16|bf16   output dtype (default: the input dtype)
      --gamma g.npy  --beta b.npy   inline affine parameters, shape [H]
      --params NAME            a registered parameter set instead
      --eps E                  epsilon (default 1e-5)
      --residual r.npy         add r to x before normalizing (fused residual)
      --residual_sum_out s.npy write x + r (needs --residual)
      --mean_out m.npy  --rstd_out r.npy   per-row statistics (fp32; 0-d for a
                               1-D input; --mean_out is layernorm only)
      --stream                 send over NormalizeStream, one request per
                               --chunk_rows rows (default 1024; only with --stream),
                               reassembled in order
  backward    gradients of a forward pass
      --op layernorm|rmsnorm  --in x.npy  --grad dy.npy   (required)
      --dx_out dx.npy          (required)
      --dgamma_out dg.npy  --dbeta_out db.npy   (fp32, [H]; --dbeta_out: layernorm only)
      --gamma g.npy | --params NAME   --eps E   --dtype as for normalize
      --mean m.npy  --rstd r.npy     saved statistics (default: recomputed; --mean:
                               layernorm only)
  params register --name NAME [--gamma g.npy] [--beta b.npy] [--dtype D] [--replace]
  params delete --name NAME
  params list [--json]
  info [--json]       server version, backend, devices, security, limits, batching
  health [--service NAME]   grpc.health.v1 check; prints SERVING or why not

common flags:
  --timeout_ms MS           deadline of each call (default 30000; at least 1)
  --wait_for_ready          wait for the server to come up instead of failing fast
  Boolean flags are --name or --name=true|false ("--stream false" is refused:
  no command but params takes a further word). Flags that cannot go together
  are refused before any call, and no output file is written unless all are.
%s%s
tensors (.npy, little-endian, C order):
  fp32 = '<f4', fp16 = '<f2', float64 '<f8' is accepted and sent as fp32.
  bf16 is stored as its raw 16-bit patterns in a uint16 array ('<u2'); '|V2'
  arrays (ml_dtypes.bfloat16 saved with np.save) are read as bf16 too. In NumPy:
    y = (np.load("y.npy").astype(np.uint32) << 16).view(np.float32)
  Or pass an fp32 file with --dtype bf16 and get fp32 back with --out_dtype fp32.

exit codes:
  0  success
  1  internal error in normctl
  2  usage error (unknown command or flag, missing or bad value)
  3  a .npy file could not be read, parsed or written
  4  the server answered an error; stderr has "normctl: CODE_NAME: server message"
     (e.g. INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
     RESOURCE_EXHAUSTED, UNIMPLEMENTED, UNAUTHENTICATED)
  5  no answer: UNAVAILABLE (not reachable, shutting down) or DEADLINE_EXCEEDED
  6  health: the server answered but is not SERVING (or does not know the service)
)";

void PrintUsage(FILE* out) {
  std::fprintf(out, kUsage, cli::kChannelFlagsHelp, cli::kRetriesFlagHelp);
}

int Main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  const std::string command = argv[1];
  absl::StatusOr<cli::Args> parsed = cli::Args::Parse(
      argc, argv, 2, {"stream", "replace", "json", "tls", "wait_for_ready", "help"});
  if (!parsed.ok()) return ReportError(kExitUsage, parsed.status());
  cli::Args& args = *parsed;
  if (args.Has("help")) {
    PrintUsage(stdout);
    return kExitOk;
  }
  absl::StatusOr<client::ChannelOptions> channel_options =
      cli::ChannelOptionsFromArgs(args, /*read_retries=*/true);
  if (!channel_options.ok()) return ReportError(kExitUsage, channel_options.status());
  absl::StatusOr<int64_t> timeout_ms = args.GetInt("timeout_ms", 30000);
  absl::StatusOr<bool> wait_for_ready = args.GetBool("wait_for_ready", false);
  if (!timeout_ms.ok()) return ReportError(kExitUsage, timeout_ms.status());
  if (*timeout_ms < 1) {
    return ReportError(kExitUsage, absl::InvalidArgumentError("--timeout_ms must be >= 1"));
  }
  if (!wait_for_ready.ok()) return ReportError(kExitUsage, wait_for_ready.status());
  // Only `params` takes a word after the command (register|delete|list); any
  // other word is a mistake, e.g. "--stream false" (write --stream=false).
  const size_t words = command == "params" ? 1 : 0;
  if (args.positional().size() > words) {
    return ReportError(kExitUsage, absl::InvalidArgumentError(absl::StrCat(
                                       "unexpected argument '", args.positional()[words],
                                       "' (boolean flags take --name=true|false)")));
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::MakeChannel(*channel_options);
  if (!channel.ok()) return ReportError(kExitUsage, channel.status());
  client::NormalizerClient client(*channel);
  Session session;
  session.client = &client;
  session.call.timeout = absl::Milliseconds(*timeout_ms);
  session.call.wait_for_ready = *wait_for_ready;

  if (command == "normalize") return RunNormalize(args, session);
  if (command == "backward") return RunBackward(args, session);
  if (command == "params") return RunParams(args, session);
  if (command == "info") return RunInfo(args, session);
  if (command == "health") return RunHealth(args, session);
  std::fprintf(stderr, "normctl: unknown command '%s' (see normctl --help)\n", command.c_str());
  return kExitUsage;
}

}  // namespace

int ReportRpcError(const absl::Status& status) {
  std::fprintf(stderr, "normctl: %s: %s\n", absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
  if (status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    return kExitUnreachable;
  }
  return kExitRejected;
}

int ReportError(int code, const absl::Status& status) {
  std::fprintf(stderr, "normctl: %s\n", std::string(status.message()).c_str());
  return code;
}

}  // namespace normsvc::normctl

int main(int argc, char** argv) { return normsvc::normctl::Main(argc, argv); }
