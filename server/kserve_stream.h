// ModelStreamInfer: inferences over one bidirectional stream, one at a
// time (read, infer, write, then read the next), so replies come in request
// order and at most one request per stream is held. A failed request is
// answered with error_message and the stream goes on; the stream ends OK
// after the client half-closes. When the server drains, a stream waiting
// for a request ends at once and a busy one after its reply, both with
// UNAVAILABLE.
#pragma once

#include <grpcpp/support/server_callback.h>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve_statistics.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

class KserveStreamCall;

// Open ModelStreamInfer streams, so a drain can reach idle ones.
class KserveStreamRegistry {
 public:
  void Add(KserveStreamCall* stream);
  void Remove(KserveStreamCall* stream);
  // Tells every open stream (and any opened later) to finish.
  void DrainAll();

 private:
  absl::Mutex mutex_;
  absl::flat_hash_set<KserveStreamCall*> streams_ ABSL_GUARDED_BY(mutex_);
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
};

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
StartKserveModelStreamInfer(ServiceContext& service, KserveStatistics& statistics,
                            KserveStreamRegistry& registry, grpc::CallbackServerContext* context);

}  // namespace normsvc::server
