// The control-plane RPCs: RegisterParameters and DeleteParameters (their
// uploads and frees run on the control thread, never in the handler),
// ListParameters and GetServerInfo (answered in the handler).
#pragma once

#include <grpcpp/support/server_callback.h>

#include "normsvc/v1/normalizer.pb.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

grpc::ServerUnaryReactor* StartRegisterParameters(ServiceContext& service,
                                                  grpc::CallbackServerContext* context,
                                                  const v1::RegisterParametersRequest* request,
                                                  v1::RegisterParametersResponse* response);
grpc::ServerUnaryReactor* StartDeleteParameters(ServiceContext& service,
                                                grpc::CallbackServerContext* context,
                                                const v1::DeleteParametersRequest* request,
                                                v1::DeleteParametersResponse* response);
grpc::ServerUnaryReactor* StartListParameters(ServiceContext& service,
                                              grpc::CallbackServerContext* context,
                                              const v1::ListParametersRequest* request,
                                              v1::ListParametersResponse* response);
grpc::ServerUnaryReactor* StartGetServerInfo(ServiceContext& service,
                                             grpc::CallbackServerContext* context,
                                             const v1::GetServerInfoRequest* request,
                                             v1::GetServerInfoResponse* response);

}  // namespace normsvc::server
