// The control-plane RPCs: RegisterParameters and DeleteParameters (their
// uploads and frees run on the control thread, never in the handler),
// ListParameters and GetServerInfo (answered in the handler).
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include "normsvc/v1/normalizer.pb.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

// Each takes the request's bytes and writes the response's (raw methods,
// raw_message.h): a request that does not parse is INVALID_ARGUMENT.
grpc::ServerUnaryReactor* StartRegisterParameters(ServiceContext& service,
                                                  grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response);
grpc::ServerUnaryReactor* StartDeleteParameters(ServiceContext& service,
                                                grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response);
grpc::ServerUnaryReactor* StartListParameters(ServiceContext& service,
                                              grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response);
grpc::ServerUnaryReactor* StartGetServerInfo(ServiceContext& service,
                                             grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response);

}  // namespace normsvc::server
