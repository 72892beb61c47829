// The unary tensor RPCs, Normalize and NormalizeBackward, on gRPC's
// callback API. The handler validates, builds the task and schedules it
// without blocking; the reply is sent from the worker thread that finishes
// the task (or at once for a refused or empty request).
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include "normsvc/v1/normalizer.pb.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

// The requests and responses are the message bytes (raw gRPC methods): the
// call parses the request (a request that does not parse is
// INVALID_ARGUMENT) and writes the response's bytes; Normalize encodes its
// response by hand (wire_response.h).
grpc::ServerUnaryReactor* StartNormalize(ServiceContext& service,
                                         grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response);
grpc::ServerUnaryReactor* StartNormalizeBackward(ServiceContext& service,
                                                 grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response);

}  // namespace normsvc::server
