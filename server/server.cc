#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <prometheus/exposer.h>

#include "absl/strings/str_cat.h"
#include "server/auth.h"
#include "server/auth_services.h"
#include "server/build_info.h"
#include "server/control_queue.h"
#include "server/cpu_executor.h"
#include "server/drain_gate.h"
#include "server/executor_pool.h"
#include "server/gpu_backend.h"
#include "server/kserve_service.h"
#include "server/log.h"
#include "server/memory_budget.h"
#include "server/memory_release.h"
#include "server/metrics.h"
#include "server/normalize_stream.h"
#include "server/nvml.h"
#include "server/parameter_store.h"
#include "server/process_telemetry.h"
#include "server/service.h"
#include "server/service_context.h"
#include "server/staging_layout.h"
#include "server/tls_config.h"
#include "server/usable_cpus.h"

namespace normsvc::server {
namespace {

constexpr char kServiceName[] = "normsvc.v1.Normalizer";

// Requests one batch may hold: every queued one, at most one per row, and
// at most 65,536 (each slot keeps room for that many segment table
// entries, 128 bytes each, in pinned and device memory).
int64_t MaxBatchTasks(const ServerOptions& options) {
  return std::min({options.max_queue_size, options.max_batch_rows, int64_t{65536}});
}

// Opens and closes a TCP connection to 127.0.0.1:`port`; errors are ignored.
void ConnectAndClose(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  close(fd);
}

v1::GetServerInfoResponse MakeServerInfo(const ServerOptions& o, const std::string& backend,
                                         ExecutorPool& pool) {
  v1::GetServerInfoResponse info;
  info.set_version(NORMSVC_VERSION);
  info.set_git_commit(GitCommit());
  info.set_backend(backend);
  int64_t device_buffer_bytes = 0;
  int64_t backward_workspace_bytes = 0;
  for (int i = 0; i < pool.size(); ++i) {
    const DeviceDescription& d = pool.executor(i).device();
    device_buffer_bytes += d.device_buffer_bytes;
    backward_workspace_bytes = std::max(backward_workspace_bytes, d.backward_workspace_bytes);
    if (d.index < 0) continue;
    v1::GetServerInfoResponse::Device* device = info.add_devices();
    device->set_index(d.index);
    device->set_name(d.name);
    device->set_memory_total_bytes(d.memory_total_bytes);
    device->set_compute_capability(d.compute_capability);
  }
  v1::GetServerInfoResponse::Limits* limits = info.mutable_limits();
  limits->set_max_hidden_size(o.max_hidden_size);
  limits->set_max_request_rows(o.max_request_rows);
  limits->set_max_request_bytes(o.max_request_bytes);
  limits->set_max_receive_message_bytes(o.max_receive_message_bytes);
  limits->set_max_queued_bytes(o.max_queued_bytes);
  limits->set_staging_buffer_bytes(backend == "cuda" ? o.staging_buffer_bytes : 0);
  limits->set_device_buffer_bytes(device_buffer_bytes);
  limits->set_max_parameter_sets(o.max_parameter_sets);
  limits->set_max_parameter_bytes(o.max_parameter_bytes);
  limits->set_grpc_memory_quota_bytes(GrpcMemoryQuotaBytes(o));
  limits->set_backward_workspace_bytes(backward_workspace_bytes);
  v1::GetServerInfoResponse::Batching* batching = info.mutable_batching();
  batching->set_max_batch_rows(o.max_batch_rows);
  batching->set_max_batch_bytes(o.max_batch_bytes);
  batching->set_max_queue_delay_us(o.max_queue_delay_us);
  batching->set_max_queue_size(o.max_queue_size);
  batching->set_batches_in_flight(o.batches_in_flight);
  batching->set_idle_spin_us(o.idle_spin_us);
  batching->set_overlap_min_bytes(o.overlap_min_bytes);
  const TransportSecurity transport = RequestedTransportSecurity(o);
  v1::GetServerInfoResponse::Security* security = info.mutable_security();
  security->set_tls(transport != TransportSecurity::kPlaintext);
  security->set_client_certificate_required(transport == TransportSecurity::kMutualTls);
  security->set_bearer_token_required(!o.auth_token_file.empty());
  return info;
}

// The options with their automatic values resolved for this host
// (--idle_spin_us=-1); invalid values stay, for ValidateOptions to refuse.
ServerOptions ResolveAutomaticOptions(ServerOptions options) {
  if (options.idle_spin_us == -1) {
    options.idle_spin_us = ResolveIdleSpinUs(options.idle_spin_us, UsableCpus());
  }
  return options;
}

}  // namespace

Server::Server(ServerOptions options) : options_(ResolveAutomaticOptions(std::move(options))) {}

Server::~Server() { Stop(); }

const v1::GetServerInfoResponse& Server::info() const { return context_->server_info; }

int64_t Server::queued_bytes() const { return budget_ != nullptr ? budget_->used() : 0; }

absl::Status Server::Start() {
  if (started_) return absl::FailedPreconditionError("Start() was already called");
  started_ = true;
  if (absl::Status status = ValidateOptions(options_); !status.ok()) return status;
  LogLevel level = LogLevel::kInfo;
  ParseLogLevel(options_.log_level, &level);
  SetLogLevel(level);

  if (absl::Status status = LoadSecurity(); !status.ok()) return status;
  if (absl::Status status = CreateExecutors(); !status.ok()) return status;
  if (absl::Status status = StartGrpc(); !status.ok()) return status;
  if (absl::Status status = StartMetricsEndpoint(); !status.ok()) return status;
  if (absl::Status status = StartHealthPort(); !status.ok()) return status;
  SetServing(true);
  const int64_t overlap_min_bytes = options_.overlap_min_bytes;
  Log(LogLevel::kInfo, "serving on port ", grpc_port_, " (",
      TransportSecurityName(RequestedTransportSecurity(options_)),
      token_auth_ != nullptr ? ", bearer token required" : "", ") with the ", backend_,
      " backend (", pool_->size(), " executor", pool_->size() == 1 ? "" : "s",
      ", idle workers poll ", options_.idle_spin_us, " us, ",
      overlap_min_bytes > 0
          ? absl::StrCat("a second batch in flight waits for ", overlap_min_bytes, " queued bytes")
          : std::string("a second batch in flight starts whenever a slot is free"),
      ")", metrics_port_ > 0 ? absl::StrCat(", metrics on port ", metrics_port_) : "",
      health_port_ > 0 ? absl::StrCat(", health on port ", health_port_) : "");
  return absl::OkStatus();
}

absl::Status Server::LoadSecurity() {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options_);
  if (!credentials.ok()) return credentials.status();
  credentials_ = *std::move(credentials);
  if (options_.auth_token_file.empty()) return absl::OkStatus();
  absl::StatusOr<BearerTokenAuth> auth = BearerTokenAuth::FromFile(options_.auth_token_file);
  if (!auth.ok()) return auth.status();
  token_auth_ = std::make_unique<BearerTokenAuth>(*std::move(auth));
  if (RequestedTransportSecurity(options_) == TransportSecurity::kPlaintext) {
    Log(LogLevel::kWarning,
        "--auth_token_file without --tls_cert_file: bearer tokens cross the network readable; "
        "use TLS unless the network is trusted");
  }
  return absl::OkStatus();
}

absl::Status Server::CreateExecutors() {
  const int gpus = VisibleGpuCount();
  bool use_gpu = false;
  switch (options_.backend) {
    case Backend::kCpu:
      break;
    case Backend::kCuda:
      if (gpus == 0) {
        return absl::FailedPreconditionError(
            GpuBackendCompiled() ? "--backend=cuda, but no GPU is visible"
                                 : "--backend=cuda, but this build has no CUDA backend");
      }
      use_gpu = true;
      break;
    case Backend::kAuto:
      use_gpu = gpus > 0;
      break;
  }
  std::vector<std::unique_ptr<Executor>> executors;
  if (use_gpu) {
    const int64_t largest_row = LargestRowStagingBytes(options_.max_hidden_size);
    if (options_.staging_buffer_bytes < largest_row) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--staging_buffer_bytes ", options_.staging_buffer_bytes,
          " holds less than one row of the largest request --max_hidden_size ",
          options_.max_hidden_size, " admits (", largest_row,
          " bytes: fp32 tensors with a residual, inline parameters and statistics); raise "
          "--staging_buffer_bytes or lower --max_hidden_size"));
    }
    std::vector<int> devices = options_.devices;
    if (devices.empty()) {
      for (int d = 0; d < gpus; ++d) devices.push_back(d);
    }
    for (int d : devices) {
      if (d >= gpus) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices: device ", d, " does not exist (", gpus, " visible)"));
      }
      GpuExecutorOptions gpu;
      gpu.device = d;
      gpu.executor_index = static_cast<int>(executors.size());
      gpu.slots = options_.batches_in_flight;
      gpu.staging_bytes = options_.staging_buffer_bytes;
      gpu.wait = options_.gpu_wait;
      gpu.timed_batch_interval = options_.timed_batch_interval;
      gpu.max_batch_tasks = MaxBatchTasks(options_);
      gpu.max_hidden = options_.max_hidden_size;
      gpu.max_request_rows = options_.max_request_rows;
      absl::StatusOr<std::unique_ptr<Executor>> executor = CreateGpuExecutor(gpu);
      if (!executor.ok()) return executor.status();
      executors.push_back(*std::move(executor));
    }
    backend_ = "cuda";
  } else {
    CpuExecutorOptions cpu;
    cpu.slots = options_.batches_in_flight;
    executors.push_back(std::make_unique<CpuExecutor>(cpu));
    backend_ = "cpu";
  }

  std::vector<std::string> labels;
  std::vector<std::string> pci_bus_ids;
  for (const auto& executor : executors) {
    labels.push_back(executor->device().label);
    if (!executor->device().pci_bus_id.empty())
      pci_bus_ids.push_back(executor->device().pci_bus_id);
  }
  metrics_ = std::make_unique<ServiceMetrics>(
      labels, BuildInfo{NORMSVC_VERSION, GitCommit(), CudaRuntimeVersion(), backend_});
  for (size_t i = 0; i < executors.size(); ++i) {
    metrics_->device(static_cast<int>(i))
        .copy_bandwidth->Set(executors[i]->device().copy_bandwidth_bytes_per_second);
  }
  telemetry_ = std::make_shared<GpuTelemetry>(pci_bus_ids);
  process_telemetry_ = std::make_shared<ProcessTelemetry>();

  BatcherOptions batching;
  batching.max_batch_rows = options_.max_batch_rows;
  batching.max_batch_bytes = options_.max_batch_bytes;
  batching.max_batch_tasks = MaxBatchTasks(options_);
  batching.max_queue_delay = absl::Microseconds(options_.max_queue_delay_us);
  batching.max_queue_size = options_.max_queue_size;
  batching.idle_spin = absl::Microseconds(options_.idle_spin_us);
  batching.overlap_min_bytes = options_.overlap_min_bytes;
  budget_ = std::make_unique<MemoryBudget>(options_.max_queued_bytes);
  memory_releaser_ = std::make_unique<IdleMemoryReleaser>(
      MemoryReleaseOptions{absl::Seconds(options_.memory_release_interval_s)},
      [budget = budget_.get()] { return budget->used() == 0; },
      MemoryReleaseMetrics{&metrics_->heap_released_bytes(), &metrics_->heap_releases()});
  pool_ = std::make_unique<ExecutorPool>(std::move(executors), batching, budget_.get(), *metrics_,
                                         static_cast<int>(options_.reply_threads));
  pool_->SetNoHealthyExecutorCallback([this] {
    Log(LogLevel::kError, "no healthy executor left: health is NOT_SERVING until restart");
    SetServing(false);
  });
  control_ = std::make_shared<ControlQueue>();
  store_ = std::make_unique<ParameterStore>(
      ParameterLimits{options_.max_parameter_sets, options_.max_parameter_bytes},
      pool_->executor_pointers(),
      [control = std::weak_ptr<ControlQueue>(control_)](std::function<void()> job) {
        const std::shared_ptr<ControlQueue> queue = control.lock();
        return queue != nullptr && queue->Post(std::move(job));
      });
  gate_ = std::make_unique<DrainGate>();
  streams_ = std::make_unique<CallRegistry>();
  context_ = std::make_unique<ServiceContext>();
  context_->limits = {options_.max_hidden_size, options_.max_request_rows,
                      options_.max_request_bytes};
  context_->max_stream_in_flight = options_.max_stream_in_flight;
  context_->max_stream_bytes = std::max<int64_t>(1, options_.max_queued_bytes / kStreamShare);
  context_->pool = pool_.get();
  context_->store = store_.get();
  context_->metrics = metrics_.get();
  context_->control = control_.get();
  context_->gate = gate_.get();
  context_->streams = streams_.get();
  context_->server_info = MakeServerInfo(options_, backend_, *pool_);
  service_ = std::make_unique<NormalizerService>(*context_);
  kserve_service_ = std::make_unique<KserveService>(*context_);
  pool_->Start();
  pool_->WatchForStuckBatches(
      absl::Seconds(ResolveBatchTimeoutS(options_.batch_timeout_s, backend_)));
  return absl::OkStatus();
}

absl::Status Server::StartGrpc() {
  static std::once_flag reflection_once;
  std::call_once(reflection_once, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
  const int64_t largest_request = LargestRequestMessageBytes(options_);
  if (options_.max_receive_message_bytes < largest_request) {
    Log(LogLevel::kWarning, "--max_receive_message_bytes ", options_.max_receive_message_bytes,
        " is below the largest request the other limits admit (", largest_request,
        " bytes: a backward request's x and dy of --max_request_bytes each with its statistics, "
        "or a forward request with a residual); gRPC refuses larger messages with "
        "RESOURCE_EXHAUSTED before they are validated");
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.grpc_address, credentials_, &grpc_port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_receive_message_bytes));
  builder.SetMaxSendMessageSize(-1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(options_.keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(options_.keepalive_timeout_ms));
  // Clients may ping as often as every 5 s without being sent away, also on
  // a connection with no call open (load balancers and clients that keep
  // idle connections alive; gRPC's default allows that only every 2 hours).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (options_.max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(options_.max_connection_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(options_.max_connection_age_grace_ms));
  }
  if (token_auth_ != nullptr) {
    guard_ = std::make_unique<CallGuard>(*token_auth_, *metrics_);
    authenticated_service_ = std::make_unique<AuthenticatedNormalizer>(*service_, *guard_);
    authenticated_kserve_service_ =
        std::make_unique<AuthenticatedKserve>(*kserve_service_, *guard_);
    builder.RegisterService(authenticated_service_.get());
    builder.RegisterService(authenticated_kserve_service_.get());
  } else {
    builder.RegisterService(service_.get());
    builder.RegisterService(kserve_service_.get());
  }
  if (const int64_t quota = GrpcMemoryQuotaBytes(options_); quota > 0) {
    grpc::ResourceQuota resource_quota("normsvc");
    resource_quota.Resize(static_cast<std::size_t>(quota));
    builder.SetResourceQuota(resource_quota);
  }
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("--grpc_address: could not listen on ", options_.grpc_address));
  }
  return absl::OkStatus();
}

absl::Status Server::StartHealthPort() {
  if (options_.health_address.empty()) return absl::OkStatus();
  // Only the default health service (and reflection, which every server
  // gets) is registered here: no RPC of the service is reachable.
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.health_address, grpc::InsecureServerCredentials(),
                           &health_port_);
  health_server_ = builder.BuildAndStart();
  if (health_server_ == nullptr || health_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("--health_address: could not listen on ", options_.health_address));
  }
  return absl::OkStatus();
}

void Server::SetServing(bool serving) {
  for (grpc::Server* server : {grpc_server_.get(), health_server_.get()}) {
    if (server == nullptr) continue;
    grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
    health->SetServingStatus("", serving);
    health->SetServingStatus(kServiceName, serving);
  }
}

absl::Status Server::StartMetricsEndpoint() {
  if (options_.metrics_address.empty()) return absl::OkStatus();
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(options_.metrics_address);
    exposer_->RegisterCollectable(metrics_->registry());
    exposer_->RegisterCollectable(telemetry_);
    exposer_->RegisterCollectable(process_telemetry_);
    const std::vector<int> ports = exposer_->GetListeningPorts();
    metrics_port_ = ports.empty() ? 0 : ports.front();
  } catch (const std::exception& error) {
    return absl::UnavailableError(absl::StrCat("--metrics_address: could not listen on ",
                                               options_.metrics_address, ": ", error.what()));
  }
  return absl::OkStatus();
}

int64_t Server::ReleaseFreeHeapNow() {
  return memory_releaser_ != nullptr ? memory_releaser_->ReleaseNow() : 0;
}

bool Server::Stop() {
  if (stopped_) return true;
  stopped_ = true;
  bool drained = true;
  const absl::Time deadline = absl::Now() + absl::Seconds(options_.drain_timeout_s);
  // Shutdown order; each step relies on the one before:
  // 1. Health NOT_SERVING: load balancers and health-checking clients stop
  //    sending new work here.
  SetServing(false);
  // 2. Refuse new requests with UNAVAILABLE (the drain gate), and tell open
  //    streams to stop reading and finish once their requests are answered.
  if (gate_ != nullptr) gate_->StartDrain();
  if (streams_ != nullptr) streams_->DrainAll();
  if (kserve_service_ != nullptr) kserve_service_->DrainStreams();
  // 3. Drain: the batchers launch what is queued without waiting for
  //    max_queue_delay, until every accepted request is answered or the
  //    drain timeout passes.
  if (pool_ != nullptr) pool_->Flush();
  if (gate_ != nullptr) {
    drained = gate_->WaitIdle(deadline);
    if (!drained) {
      Log(LogLevel::kWarning, "drain timeout: ", gate_->in_flight(), " requests still unanswered");
    }
  }
  // 4. Keep refusing for --drain_grace_ms (within the drain timeout): calls
  //    that reach gRPC after its Shutdown begins are cancelled by the gRPC
  //    core before any handler sees them, so clients still sending get a
  //    clean UNAVAILABLE from the handlers meanwhile and can go elsewhere.
  absl::SleepFor(std::min(absl::Milliseconds(options_.drain_grace_ms), deadline - absl::Now()));
  // 5. Shut gRPC down: stop listening; wait for calls to finish (streams end
  //    as they go idle); calls still open at the deadline are cancelled, and
  //    gRPC then waits for each to finish. The workers still run, so
  //    cancelled tasks still get finished; a task in a batch hung on a
  //    device never is, and then Shutdown does not return (StopWatchdog
  //    ends the process). Then the health port (it answered NOT_SERVING
  //    since step 1).
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Seconds(1))));
  }
  if (health_server_ != nullptr) health_server_->Shutdown(absl::ToChronoTime(absl::Now()));
  //    gRPC may run a stream's OnDone after its Shutdown returned: wait for
  //    the last one before anything a stream uses is freed (bounded: gRPC
  //    has cancelled whatever was still open).
  const absl::Time streams_deadline = absl::Now() + absl::Seconds(5);
  if (streams_ != nullptr && !streams_->WaitUntilEmpty(streams_deadline)) {
    Log(LogLevel::kWarning, streams_->size(), " NormalizeStream calls still open after shutdown");
  }
  if (kserve_service_ != nullptr && !kserve_service_->WaitForStreams(streams_deadline)) {
    Log(LogLevel::kWarning, "ModelStreamInfer calls still open after shutdown");
  }
  // 6. Close the batchers and join their workers (the queues are empty
  //    unless the drain timed out), then the control thread.
  if (pool_ != nullptr) {
    pool_->Close();
    pool_->Join();
  }
  if (control_ != nullptr) control_->Stop();
  if (memory_releaser_ != nullptr) memory_releaser_->Stop();
  // 7. The metrics endpoint; executors (device memory, streams) are released
  //    with the pool when the Server is destroyed.
  if (exposer_ != nullptr) {
    // The endpoint's listener thread notices a stop request only between
    // polls of up to 2 s; a connection made after the request wakes it.
    std::thread waker([port = metrics_port_] {
      absl::SleepFor(absl::Milliseconds(20));
      ConnectAndClose(port);
    });
    exposer_.reset();
    waker.join();
  }
  if (grpc_server_ != nullptr) Log(LogLevel::kInfo, "stopped", drained ? "" : " (drain timed out)");
  return drained;
}

}  // namespace normsvc::server
