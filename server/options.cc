#include "server/options.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "normsvc/kernels/types.h"
#include "server/log.h"

namespace normsvc::server {
namespace {

// One flag: its name, help text, and how it reads and prints its field.
struct FlagSpec {
  std::string name;
  std::string help;
  std::function<absl::Status(const std::string& value, ServerOptions* options)> set;
  std::function<std::string(const ServerOptions& options)> get;
};

FlagSpec Int64Flag(std::string name, int64_t ServerOptions::*field, std::string help) {
  FlagSpec spec;
  spec.name = name;
  spec.help = std::move(help);
  spec.set = [field, name](const std::string& value, ServerOptions* options) {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(value, &parsed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": '", value, "' is not an integer"));
    }
    options->*field = parsed;
    return absl::OkStatus();
  };
  spec.get = [field](const ServerOptions& options) { return absl::StrCat(options.*field); };
  return spec;
}

FlagSpec StringFlag(std::string name, std::string ServerOptions::*field, std::string help) {
  FlagSpec spec;
  spec.name = std::move(name);
  spec.help = std::move(help);
  spec.set = [field](const std::string& value, ServerOptions* options) {
    options->*field = value;
    return absl::OkStatus();
  };
  spec.get = [field](const ServerOptions& options) { return options.*field; };
  return spec;
}

absl::Status ParseBackend(const std::string& value, Backend* backend) {
  if (value == "auto") {
    *backend = Backend::kAuto;
  } else if (value == "cuda") {
    *backend = Backend::kCuda;
  } else if (value == "cpu") {
    *backend = Backend::kCpu;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: '", value, "' is not one of auto, cuda, cpu"));
  }
  return absl::OkStatus();
}

absl::Status ParseGpuWait(const std::string& value, GpuWait* wait) {
  if (value == "auto") {
    *wait = GpuWait::kAuto;
  } else if (value == "spin") {
    *wait = GpuWait::kSpin;
  } else if (value == "block") {
    *wait = GpuWait::kBlock;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_wait: '", value, "' is not one of auto, spin, block"));
  }
  return absl::OkStatus();
}

absl::Status ParseDevices(const std::string& value, std::vector<int>* devices) {
  devices->clear();
  if (value == "all" || value.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    int index = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices: '", value, "' is not 'all' or a list of device indices"));
    }
    if (std::find(devices->begin(), devices->end(), index) != devices->end()) {
      // Two executors on one device would share its label in every metric series.
      return absl::InvalidArgumentError(
          absl::StrCat("--devices: device ", index, " is listed twice in '", value, "'"));
    }
    devices->push_back(index);
  }
  return absl::OkStatus();
}

std::vector<FlagSpec> Flags() {
  std::vector<FlagSpec> flags;
  flags.push_back(StringFlag("grpc_address", &ServerOptions::grpc_address, "gRPC listen address"));
  flags.push_back(StringFlag("metrics_address", &ServerOptions::metrics_address,
                             "Prometheus /metrics listen address, its own port with no TLS or "
                             "token (empty = off; e.g. 127.0.0.1:9464 for this host only)"));
  flags.push_back(StringFlag("health_address", &ServerOptions::health_address,
                             "extra plaintext gRPC port serving only grpc.health.v1, with the main "
                             "port's status, for probes that cannot speak TLS (empty = off)"));
  flags.push_back(StringFlag("tls_cert_file", &ServerOptions::tls_cert_file,
                             "PEM certificate chain of the gRPC port; with --tls_key_file the port "
                             "speaks TLS only (empty = plaintext)"));
  flags.push_back(StringFlag("tls_key_file", &ServerOptions::tls_key_file,
                             "PEM private key (unencrypted) of --tls_cert_file"));
  flags.push_back(StringFlag("tls_client_ca_file", &ServerOptions::tls_client_ca_file,
                             "PEM CA certificates; set: every client must present a certificate "
                             "they signed (mutual TLS; needs --tls_cert_file)"));
  flags.push_back(StringFlag("auth_token_file", &ServerOptions::auth_token_file,
                             "file holding a bearer token (trailing newline stripped); set: every "
                             "RPC but grpc.health.v1 and reflection needs the metadata "
                             "'authorization: Bearer <token>', else UNAUTHENTICATED"));
  flags.push_back(
      {"backend", "auto (cuda if a GPU is visible, else cpu), cuda, cpu",
       [](const std::string& v, ServerOptions* o) { return ParseBackend(v, &o->backend); },
       [](const ServerOptions& o) { return std::string(BackendName(o.backend)); }});
  flags.push_back(
      {"devices", "comma-separated CUDA device indices for executors, or all",
       [](const std::string& v, ServerOptions* o) { return ParseDevices(v, &o->devices); },
       [](const ServerOptions& o) {
         return o.devices.empty() ? std::string("all") : absl::StrJoin(o.devices, ",");
       }});
  flags.push_back(Int64Flag("max_batch_rows", &ServerOptions::max_batch_rows, "rows per launch"));
  flags.push_back(
      Int64Flag("max_batch_bytes", &ServerOptions::max_batch_bytes, "input bytes per launch"));
  flags.push_back(
      Int64Flag("max_queue_delay_us", &ServerOptions::max_queue_delay_us,
                "how long a batch may wait to fill (0: launch when an executor is free)"));
  flags.push_back(Int64Flag("max_queue_size", &ServerOptions::max_queue_size,
                            "queued requests per executor before RESOURCE_EXHAUSTED"));
  flags.push_back(Int64Flag(
      "reply_threads", &ServerOptions::reply_threads,
      "threads that send a batch's replies beside the thread that ran it "
      "(-1: a quarter of the CPUs the process may use, 2 to 8; 0: that thread sends them all; "
      "at most 256)"));
  flags.push_back(
      {"gpu_wait",
       "how a batch's thread waits for the GPU: spin (lowest latency, a core busy "
       "per batch in flight), block (sleeps until the driver wakes it), auto (spins "
       "only when no other request was queued as its batch closed)",
       [](const std::string& v, ServerOptions* o) { return ParseGpuWait(v, &o->gpu_wait); },
       [](const ServerOptions& o) { return std::string(GpuWaitName(o.gpu_wait)); }});
  flags.push_back(Int64Flag(
      "timed_batch_interval", &ServerOptions::timed_batch_interval,
      "GPU only: time the copies and the kernel of one batch in this many (the "
      "normsvc_batch_{h2d,kernel,d2h}_seconds and kernel bandwidth metrics; each timed batch "
      "takes a few microseconds longer; 1: every batch)"));
  flags.push_back(Int64Flag("idle_spin_us", &ServerOptions::idle_spin_us,
                            "how long one idle batch worker polls for new requests before it "
                            "sleeps: lower latency at low load on a host with idle cores, for up "
                            "to one busy core; on a busy or CPU-limited host (a pod with a CPU "
                            "limit) it slows every request (0: off; -1: 500 where the process "
                            "may use 8 or more CPUs, its affinity and cgroup CPU limit counted, "
                            "else off)"));
  flags.push_back(Int64Flag("max_queued_bytes", &ServerOptions::max_queued_bytes,
                            "request + response bytes accepted and not yet answered (a reply "
                            "counts until it is sent), per server, before RESOURCE_EXHAUSTED (a "
                            "request needing more than this alone: INVALID_ARGUMENT)"));
  flags.push_back(
      Int64Flag("max_hidden_size", &ServerOptions::max_hidden_size, "largest H accepted"));
  flags.push_back(Int64Flag("max_request_rows", &ServerOptions::max_request_rows,
                            "largest row count per request"));
  flags.push_back(Int64Flag("max_request_bytes", &ServerOptions::max_request_bytes,
                            "largest input tensor per request (x; a residual may be as large)"));
  flags.push_back(Int64Flag(
      "max_receive_message_bytes", &ServerOptions::max_receive_message_bytes,
      "gRPC receive limit (>= 64 MiB); a backward request carries x and dy of up to "
      "--max_request_bytes each (a forward one x and a residual) plus statistics and "
      "parameters, so below about twice --max_request_bytes gRPC refuses such requests "
      "(RESOURCE_EXHAUSTED) before normsvc sees them; the server warns at start when this "
      "is below what the other limits admit"));
  flags.push_back(Int64Flag("max_parameter_sets", &ServerOptions::max_parameter_sets,
                            "registered parameter sets"));
  flags.push_back(Int64Flag("max_parameter_bytes", &ServerOptions::max_parameter_bytes,
                            "total bytes of parameter sets in memory: registered ones, and "
                            "replaced or deleted ones that queued requests still use"));
  flags.push_back({"batches_in_flight", "per executor, for copy/compute overlap",
                   [](const std::string& v, ServerOptions* o) {
                     if (!absl::SimpleAtoi(v, &o->batches_in_flight)) {
                       return absl::InvalidArgumentError(
                           absl::StrCat("--batches_in_flight: '", v, "' is not an integer"));
                     }
                     return absl::OkStatus();
                   },
                   [](const ServerOptions& o) { return absl::StrCat(o.batches_in_flight); }});
  flags.push_back(Int64Flag(
      "overlap_min_bytes", &ServerOptions::overlap_min_bytes,
      "a second batch starts while one runs on the same executor only when this many input "
      "bytes are queued, so that small batches wait for the running one and leave together "
      "as one launch (0: start one whenever a batch slot is free)"));
  flags.push_back(Int64Flag("staging_buffer_bytes", &ServerOptions::staging_buffer_bytes,
                            "pinned host staging (and device buffer) per in-flight batch slot; "
                            "with the CUDA backend at least one row of the largest request "
                            "--max_hidden_size admits (6 MiB at 262144), checked at start"));
  flags.push_back(Int64Flag("max_stream_in_flight", &ServerOptions::max_stream_in_flight,
                            "requests one NormalizeStream may have unanswered before it stops "
                            "reading (it also stops while its requests and unsent replies hold a "
                            "quarter of --max_queued_bytes)"));
  flags.push_back(Int64Flag("grpc_memory_quota_bytes", &ServerOptions::grpc_memory_quota_bytes,
                            "gRPC's memory quota over the bytes it has received (messages "
                            "arriving, and the buffers accepted requests hold); above it gRPC "
                            "sends connections away to free memory, so part of a burst gets "
                            "UNAVAILABLE; a soft bound (-1: --max_queued_bytes + "
                            "--max_receive_message_bytes; 0: none)"));
  flags.push_back(Int64Flag("keepalive_time_ms", &ServerOptions::keepalive_time_ms,
                            "server keepalive ping interval"));
  flags.push_back(Int64Flag("keepalive_timeout_ms", &ServerOptions::keepalive_timeout_ms,
                            "keepalive ping ack timeout"));
  flags.push_back(
      Int64Flag("max_connection_age_ms", &ServerOptions::max_connection_age_ms,
                "0 = unlimited; set in Kubernetes (e.g. 300000) so clients re-resolve"));
  flags.push_back(Int64Flag("max_connection_age_grace_ms",
                            &ServerOptions::max_connection_age_grace_ms,
                            "grace period after max connection age"));
  flags.push_back(
      Int64Flag("drain_timeout_s", &ServerOptions::drain_timeout_s,
                "on SIGTERM or SIGINT: longest wait for accepted requests before exit; a stop that "
                "overruns it by 10 s (a batch hung on a device), or a second SIGTERM or "
                "SIGINT, exits 3 at once"));
  flags.push_back(Int64Flag(
      "batch_timeout_s", &ServerOptions::batch_timeout_s,
      absl::StrCat("a batch that runs longer than this takes its executor out of service until "
                   "restart (a hung device never gives its batch slot back) and answers the "
                   "requests queued for it UNAVAILABLE; with none left, "
                   "health turns NOT_SERVING (0: never; -1: ",
                   kAutoBatchTimeoutS, " on the CUDA backend, 0 on the CPU backend)")));
  flags.push_back(Int64Flag("drain_grace_ms", &ServerOptions::drain_grace_ms,
                            "after the drain, how long new requests still get UNAVAILABLE from "
                            "the service before gRPC shuts down"));
  flags.push_back(Int64Flag("memory_release_interval_s", &ServerOptions::memory_release_interval_s,
                            "while no request is in the server, every this many seconds: give "
                            "freed heap memory back to the system once resident memory has "
                            "grown 64 MiB since the last time (0: never)"));
  flags.push_back(
      StringFlag("log_level", &ServerOptions::log_level, "debug, info, warning or error"));
  return flags;
}

std::string EnvName(const std::string& flag) {
  return absl::StrCat("NORMSVC_", absl::AsciiStrToUpper(flag));
}

std::string HelpText(const std::vector<FlagSpec>& flags) {
  const ServerOptions defaults;
  std::string text =
      "normsvc: LayerNorm/RMSNorm gRPC service\n\n"
      "Usage: normsvc [--flag=value ...]\n"
      "Each flag can also be set by the environment variable shown; the command line wins.\n\n";
  for (const FlagSpec& flag : flags) {
    absl::StrAppend(&text, "  --", flag.name, " (env ", EnvName(flag.name), ", default \"",
                    flag.get(defaults), "\")\n      ", flag.help, "\n");
  }
  absl::StrAppend(&text, "  --help     this text\n  --version  version and exit\n");
  return text;
}

}  // namespace

int64_t ResolveBatchTimeoutS(int64_t requested, std::string_view backend) {
  if (requested >= 0) return requested;
  return backend == "cuda" ? kAutoBatchTimeoutS : 0;
}

int64_t ResolveIdleSpinUs(int64_t requested, int usable_cpus) {
  if (requested >= 0) return requested;
  return usable_cpus >= kAutoIdleSpinMinCpus ? kAutoIdleSpinUs : 0;
}

const char* GpuWaitName(GpuWait wait) {
  switch (wait) {
    case GpuWait::kAuto:
      return "auto";
    case GpuWait::kSpin:
      return "spin";
    case GpuWait::kBlock:
      return "block";
  }
  return "auto";
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kCuda:
      return "cuda";
    case Backend::kCpu:
      return "cpu";
  }
  return "auto";
}

int64_t LargestRequestMessageBytes(const ServerOptions& o) {
  // In 128 bits: the limits are checked one by one, not their sums.
  constexpr __int128 kFramingBytes = int64_t{64} << 10;
  const __int128 request = o.max_request_bytes;
  const __int128 backward = 2 * request + __int128{8} * o.max_request_rows + 4 * o.max_hidden_size;
  const __int128 forward = 2 * request + __int128{8} * o.max_hidden_size;
  const __int128 largest = std::max(backward, forward) + kFramingBytes;
  return static_cast<int64_t>(std::min<__int128>(largest, std::numeric_limits<int64_t>::max()));
}

int64_t GrpcMemoryQuotaBytes(const ServerOptions& o) {
  if (o.grpc_memory_quota_bytes >= 0) return o.grpc_memory_quota_bytes;
  const __int128 sum = __int128{o.max_queued_bytes} + o.max_receive_message_bytes;
  return static_cast<int64_t>(std::min<__int128>(sum, std::numeric_limits<int64_t>::max()));
}

absl::Status ValidateOptions(const ServerOptions& o) {
  auto at_least = [](const char* flag, int64_t value, int64_t minimum) {
    return value >= minimum ? absl::OkStatus()
                            : absl::InvalidArgumentError(absl::StrCat(
                                  "--", flag, " must be >= ", minimum, ", got ", value));
  };
  const int64_t kMiB = int64_t{1} << 20;
  const int64_t kIntMax = std::numeric_limits<int>::max();
  for (absl::Status status : {
           at_least("max_batch_rows", o.max_batch_rows, 1),
           at_least("max_batch_bytes", o.max_batch_bytes, 1),
           at_least("max_queue_delay_us", o.max_queue_delay_us, 0),
           at_least("timed_batch_interval", o.timed_batch_interval, 1),
           at_least("idle_spin_us", o.idle_spin_us, -1),
           at_least("reply_threads", o.reply_threads, -1),
           at_least("max_queue_size", o.max_queue_size, 1),
           at_least("max_queued_bytes", o.max_queued_bytes, 1),
           at_least("max_hidden_size", o.max_hidden_size, 1),
           at_least("max_request_rows", o.max_request_rows, 1),
           at_least("max_request_bytes", o.max_request_bytes, 1),
           at_least("max_receive_message_bytes", o.max_receive_message_bytes, 64 * kMiB),
           at_least("max_parameter_sets", o.max_parameter_sets, 0),
           at_least("max_parameter_bytes", o.max_parameter_bytes, 0),
           at_least("batches_in_flight", o.batches_in_flight, 1),
           at_least("overlap_min_bytes", o.overlap_min_bytes, 0),
           at_least("staging_buffer_bytes", o.staging_buffer_bytes, kMiB),
           at_least("grpc_memory_quota_bytes", o.grpc_memory_quota_bytes, -1),
           at_least("max_stream_in_flight", o.max_stream_in_flight, 1),
           at_least("keepalive_time_ms", o.keepalive_time_ms, 1),
           at_least("keepalive_timeout_ms", o.keepalive_timeout_ms, 1),
           at_least("max_connection_age_ms", o.max_connection_age_ms, 0),
           at_least("max_connection_age_grace_ms", o.max_connection_age_grace_ms, 0),
           at_least("drain_timeout_s", o.drain_timeout_s, 0),
           at_least("batch_timeout_s", o.batch_timeout_s, -1),
           at_least("memory_release_interval_s", o.memory_release_interval_s, 0),
           at_least("drain_grace_ms", o.drain_grace_ms, 0),
       }) {
    if (!status.ok()) return status;
  }
  if (o.reply_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reply_threads must be <= 256, got ", o.reply_threads));
  }
  if (o.max_hidden_size > kernels::kMaxHidden) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_hidden_size must be <= ", kernels::kMaxHidden, ", got ", o.max_hidden_size));
  }
  // The edge multiplies rows by the hidden size and an element's size (at
  // most 4 bytes) in 64 bits: the limits must keep that product in range.
  if (o.max_request_rows > std::numeric_limits<int64_t>::max() / 4 / o.max_hidden_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_request_rows x --max_hidden_size x 4 bytes must fit in 64 bits, got ",
                     o.max_request_rows, " x ", o.max_hidden_size));
  }
  if (o.max_receive_message_bytes > kIntMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_receive_message_bytes must be <= ", kIntMax));
  }
  for (const auto& [flag, value] :
       {std::pair{"keepalive_time_ms", o.keepalive_time_ms},
        std::pair{"keepalive_timeout_ms", o.keepalive_timeout_ms},
        std::pair{"max_connection_age_ms", o.max_connection_age_ms},
        std::pair{"max_connection_age_grace_ms", o.max_connection_age_grace_ms}}) {
    if (value > kIntMax) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be <= ", kIntMax));
    }
  }
  if (o.grpc_address.empty()) return absl::InvalidArgumentError("--grpc_address must be set");
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert_file and --tls_key_file must be set together (only --",
                     o.tls_cert_file.empty() ? "tls_key_file" : "tls_cert_file", " is set)"));
  }
  if (!o.tls_client_ca_file.empty() && o.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca_file needs --tls_cert_file and --tls_key_file (mutual TLS is TLS with "
        "client certificates)");
  }
  LogLevel level;
  if (!ParseLogLevel(o.log_level, &level)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level: '", o.log_level, "' is not one of debug, info, warning, error"));
  }
  return absl::OkStatus();
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const EnvLookup& env) {
  const std::vector<FlagSpec> flags = Flags();
  CommandLine result;
  // The command line is read first, so that --help and --version answer
  // whatever the environment holds, and a flag given on the command line
  // ignores its environment variable (even one that would not parse).
  std::vector<std::pair<const FlagSpec*, std::string>> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      result.action = CommandLine::Action::kHelp;
      result.text = HelpText(flags);
      return result;
    }
    if (arg == "--version") {
      result.action = CommandLine::Action::kVersion;
      return result;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::string value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& flag : flags) {
      if (flag.name == name) spec = &flag;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    given.emplace_back(spec, std::move(value));
  }
  for (const FlagSpec& flag : flags) {
    const bool on_command_line = std::any_of(
        given.begin(), given.end(), [&](const auto& entry) { return entry.first == &flag; });
    if (on_command_line) continue;
    const std::string name = EnvName(flag.name);
    if (std::optional<std::string> value = env(name)) {
      if (absl::Status status = flag.set(*value, &result.options); !status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": ", status.message()));
      }
    }
  }
  for (const auto& [spec, value] : given) {
    if (absl::Status status = spec->set(value, &result.options); !status.ok()) return status;
  }
  if (absl::Status status = ValidateOptions(result.options); !status.ok()) return status;
  return result;
}

}  // namespace normsvc::server
