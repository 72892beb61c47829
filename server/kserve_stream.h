// ModelStreamInfer: inferences over one bidirectional stream, one at a
// time (read, infer, write, then read the next), so replies come in request
// order and at most one request per stream is held. A failed request is
// answered with error_message and the stream goes on; the stream ends OK
// after the client half-closes. When the server drains, a stream waiting
// for a request ends at once and a busy one after its reply, both with
// UNAVAILABLE. A message that does not parse as a ModelInferRequest is
// answered in its place in the order with error_message "INVALID_ARGUMENT:
// stream message N ..." and the stream goes on: the method is raw (bytes in
// and out), since gRPC's own parsing would report such a message as the end
// of the stream.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include "inference/grpc_service.pb.h"
#include "server/call_registry.h"
#include "server/kserve_statistics.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartKserveModelStreamInfer(
    ServiceContext& service, KserveStatistics& statistics, CallRegistry& registry,
    grpc::CallbackServerContext* context);

}  // namespace normsvc::server
