// ModelStreamInfer: inferences over one bidirectional stream, one at a
// time (read, infer, write, then read the next), so replies come in request
// order and at most one request per stream is held. A failed request is
// answered with error_message and the stream goes on; the stream ends OK
// after the client half-closes. When the server drains, a stream waiting
// for a request ends at once and a busy one after its reply, both with
// UNAVAILABLE.
#pragma once

#include <grpcpp/support/server_callback.h>

#include "inference/grpc_service.pb.h"
#include "server/call_registry.h"
#include "server/kserve_statistics.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
StartKserveModelStreamInfer(ServiceContext& service, KserveStatistics& statistics,
                            CallRegistry& registry, grpc::CallbackServerContext* context);

}  // namespace normsvc::server
