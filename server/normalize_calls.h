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

// Normalize's request and response are the message bytes (a raw gRPC
// method): the call parses the request and encodes the response itself
// (wire_response.h).
grpc::ServerUnaryReactor* StartNormalize(ServiceContext& service,
                                         grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response);
grpc::ServerUnaryReactor* StartNormalizeBackward(ServiceContext& service,
                                                 grpc::CallbackServerContext* context,
                                                 const v1::NormalizeBackwardRequest* request,
                                                 v1::NormalizeBackwardResponse* response);

}  // namespace normsvc::server
