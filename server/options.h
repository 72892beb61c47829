// Server configuration: one plain struct with in-class defaults, built once
// in main from command-line flags and NORMSVC_<FLAG> environment variables
// (a flag on the command line wins over the environment).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace normsvc::server {

enum class Backend { kAuto, kCuda, kCpu };

// How a batch's thread waits for the device: spinning (lowest latency, one
// core busy while the batch runs), sleeping until the driver wakes it
// (the core is free for other work), or spinning only when no other
// request was queued as the batch closed (kAuto, Batch::more_queued).
enum class GpuWait { kAuto, kSpin, kBlock };

struct ServerOptions {
  std::string grpc_address = "0.0.0.0:50051";
  std::string metrics_address = "0.0.0.0:9464";  // empty: no metrics endpoint
  // A second, plaintext gRPC port serving grpc.health.v1 only (the same
  // status as the main port), for probes that cannot speak TLS, such as
  // the kubelet's gRPC probes. Empty: none.
  std::string health_address;

  // Transport security of the gRPC port (tls_config.h). Cert and key both
  // set: TLS only; client CA set as well: clients must present a
  // certificate it signed (mutual TLS). All empty: plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // Bearer token every RPC but grpc.health.v1 and reflection must carry
  // (auth.h); empty: no authentication.
  std::string auth_token_file;
  Backend backend = Backend::kAuto;
  std::vector<int> devices;  // CUDA device indices; empty means all visible

  // Batching, per executor.
  int64_t max_batch_rows = 8192;
  int64_t max_batch_bytes = int64_t{64} << 20;  // input bytes per launch
  int64_t max_queue_delay_us = 0;
  int64_t max_queue_size = 4096;
  int batches_in_flight = 2;
  // A batch starts beside a running one only when this many input bytes are
  // queued (BatcherOptions::overlap_min_bytes); 0: whenever a slot is free.
  // The default is 0 on every backend: on the H200 host 256 KiB lost 0.04 of
  // the echo at 1x4096 with 64 in flight (server/README.md, 2026-12-05).
  int64_t overlap_min_bytes = 0;
  // One idle worker polls this long before sleeping (0: off; -1: auto,
  // ResolveIdleSpinUs).
  int64_t idle_spin_us = -1;
  GpuWait gpu_wait = GpuWait::kAuto;
  // GPU executors time a batch's copies and kernel apart (three more events
  // on its stream, a few microseconds of its round trip) on one batch in
  // this many; 1: every batch.
  int64_t timed_batch_interval = 16;
  // Threads that send a batch's replies beside the thread that ran it
  // (-1: a quarter of the CPUs the process may use, 2 to 8; 0: that thread
  // sends them all; at most 256).
  int64_t reply_threads = -1;

  // Memory bounds.
  int64_t max_queued_bytes = int64_t{1} << 30;  // request + response bytes accepted, per server
  int64_t max_hidden_size = 262144;
  int64_t max_request_rows = 1048576;
  int64_t max_request_bytes = int64_t{256} << 20;  // input tensor bytes per request
  // Above LargestRequestMessageBytes of the defaults (522 MiB), so that no
  // request the other limits admit is refused by gRPC's message limit.
  int64_t max_receive_message_bytes = int64_t{640} << 20;
  int64_t max_parameter_sets = 1024;
  int64_t max_parameter_bytes = int64_t{1} << 30;
  int64_t staging_buffer_bytes = int64_t{128} << 20;  // per in-flight batch slot, GPU only
  // Requests a NormalizeStream may have accepted but not yet written back;
  // beyond it the stream stops reading (flow control back to the client).
  int64_t max_stream_in_flight = 256;
  // gRPC's memory quota (a grpc::ResourceQuota over the server's receive
  // buffers: messages being received, and those requests hold). -1: auto,
  // GrpcMemoryQuotaBytes; 0: none.
  int64_t grpc_memory_quota_bytes = -1;

  // Connections.
  int64_t keepalive_time_ms = 30000;
  int64_t keepalive_timeout_ms = 10000;
  int64_t max_connection_age_ms = 0;  // 0: unlimited
  int64_t max_connection_age_grace_ms = 30000;

  // While idle, how often to check whether to give freed heap memory back
  // to the system (memory_release.h); 0: never.
  int64_t memory_release_interval_s = 10;

  int64_t drain_timeout_s = 30;
  // A batch running longer than this takes its executor out of service (0:
  // never; -1: auto, ResolveBatchTimeoutS).
  int64_t batch_timeout_s = -1;
  // After the drain, how long handlers keep answering UNAVAILABLE before
  // gRPC shuts down (see Server::Stop).
  int64_t drain_grace_ms = 200;
  std::string log_level = "info";
};

const char* BackendName(Backend backend);
const char* GpuWaitName(GpuWait wait);

// --idle_spin_us=-1 (auto): kAutoIdleSpinUs where the process may keep at
// least kAutoIdleSpinMinCpus CPUs busy (UsableCpus), else 0. The poll saves
// a thread wake-up per request at low load (about 55 us of a 0.40 ms round
// trip on the H200 host, server/README.md) but takes a core from the gRPC
// threads of a small or CPU-limited host, where it slows every request.
// Other values are returned as they are.
inline constexpr int64_t kAutoIdleSpinUs = 500;
inline constexpr int kAutoIdleSpinMinCpus = 8;
int64_t ResolveIdleSpinUs(int64_t requested, int usable_cpus);

// --batch_timeout_s=-1 (auto): kAutoBatchTimeoutS on the CUDA backend, where
// a batch takes milliseconds and one that runs a minute means a hung device;
// 0 (never) on the CPU backend, where the largest request a small host
// computes can legitimately take that long. Other values as they are.
inline constexpr int64_t kAutoBatchTimeoutS = 60;
int64_t ResolveBatchTimeoutS(int64_t requested, std::string_view backend);

// An upper bound on the gRPC message of the largest request the edge can
// accept under these limits: a backward request's x and dy of
// --max_request_bytes each, saved mean and rstd for --max_request_rows rows
// and an fp32 gamma of --max_hidden_size, or a forward request's x and
// residual with fp32 gamma and beta; plus 64 KiB for the fields around them.
// A receive limit below it lets gRPC refuse (RESOURCE_EXHAUSTED, before any
// validation) requests that every other limit admits; the server warns.
int64_t LargestRequestMessageBytes(const ServerOptions& options);

// The size of gRPC's memory quota: --grpc_memory_quota_bytes, or where it is
// -1 (auto) --max_queued_bytes plus --max_receive_message_bytes (what
// accepted requests may hold, and one more message of the largest size
// being received); 0: no quota.
int64_t GrpcMemoryQuotaBytes(const ServerOptions& options);

// Checks ranges and relations between options (e.g. the receive limit is at
// least 64 MiB); the message names the flag.
absl::Status ValidateOptions(const ServerOptions& options);

// What the command line asked for.
struct CommandLine {
  enum class Action { kRun, kHelp, kVersion };
  Action action = Action::kRun;
  ServerOptions options;
  std::string text;  // the --help or --version text
};

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnvironment();

// Parses --flag=value and --flag value forms, --help and --version. Unknown
// flags, malformed values and out-of-range values are errors naming the flag
// (or the environment variable it came from).
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const EnvLookup& env);

}  // namespace normsvc::server
