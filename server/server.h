// The normsvc server: executors, batchers, parameter store, metrics and the
// gRPC service, with explicit construction, Start() and Stop().
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/options.h"

namespace grpc {
class Server;
class ServerCredentials;
}  // namespace grpc
namespace prometheus {
class Exposer;
}

namespace normsvc::server {

class AuthenticatedKserve;
class AuthenticatedNormalizer;
class BearerTokenAuth;
class CallGuard;
class ControlQueue;
class DrainGate;
class ExecutorPool;
class GpuTelemetry;
class ProcessTelemetry;
class IdleMemoryReleaser;
class MemoryBudget;
class NormalizerService;
class KserveService;
class ParameterStore;
class ServiceMetrics;
class CallRegistry;
struct ServiceContext;

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Creates the executors for the chosen backend, binds the gRPC and metrics
  // addresses and starts serving (health SERVING). Call once.
  absl::Status Start();
  // Graceful stop (order in server.cc). Returns true when every accepted
  // request was answered within --drain_timeout_s. Idempotent.
  bool Stop();

  int grpc_port() const { return grpc_port_; }        // bound port (useful with port 0)
  int metrics_port() const { return metrics_port_; }  // 0 when metrics are off
  int health_port() const { return health_port_; }    // 0 without --health_address
  const ServerOptions& options() const { return options_; }

  // Gives the heap's freed memory back to the system now (SIGUSR1 in
  // main.cc); returns the resident bytes given back. Counted in
  // normsvc_heap_releases_total like the idle releases. Valid after Start.
  int64_t ReleaseFreeHeapNow();

  // For tests and tools in-process: valid between Start and destruction.
  ExecutorPool& pool() { return *pool_; }
  // Bytes of --max_queued_bytes held now: accepted requests and replies not
  // yet sent.
  int64_t queued_bytes() const;
  ServiceMetrics& metrics() { return *metrics_; }
  const v1::GetServerInfoResponse& info() const;

 private:
  // Reads and checks the --tls_* and --auth_token_file files, before
  // anything is allocated, so a bad file fails the start at once.
  absl::Status LoadSecurity();
  absl::Status CreateExecutors();
  absl::Status StartGrpc();
  absl::Status StartMetricsEndpoint();
  absl::Status StartHealthPort();
  // grpc.health.v1 status of the server and of the Normalizer service, on
  // the main port and the health port.
  void SetServing(bool serving);

  const ServerOptions options_;
  bool started_ = false;
  bool stopped_ = false;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int health_port_ = 0;
  std::string backend_;

  std::unique_ptr<ServiceMetrics> metrics_;
  std::unique_ptr<MemoryBudget> budget_;
  std::unique_ptr<IdleMemoryReleaser> memory_releaser_;  // reads budget_
  std::unique_ptr<ExecutorPool> pool_;
  std::unique_ptr<ParameterStore> store_;
  // Shared so that a parameter set freed after the Server let it go (the
  // store's sets are destroyed after it) finds it gone instead of dangling.
  std::shared_ptr<ControlQueue> control_;
  std::unique_ptr<DrainGate> gate_;
  std::unique_ptr<CallRegistry> streams_;  // open NormalizeStream calls
  std::unique_ptr<ServiceContext> context_;
  std::unique_ptr<NormalizerService> service_;
  std::unique_ptr<KserveService> kserve_service_;  // inference.GRPCInferenceService
  // Transport credentials of the gRPC port; with --auth_token_file the
  // token check and the two services wrapped by it (auth_services.h), which
  // gRPC then serves instead of the inner ones.
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  std::unique_ptr<BearerTokenAuth> token_auth_;
  std::unique_ptr<CallGuard> guard_;
  std::unique_ptr<AuthenticatedNormalizer> authenticated_service_;
  std::unique_ptr<AuthenticatedKserve> authenticated_kserve_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<grpc::Server> health_server_;  // --health_address: health only
  std::shared_ptr<GpuTelemetry> telemetry_;
  std::shared_ptr<ProcessTelemetry> process_telemetry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace normsvc::server
