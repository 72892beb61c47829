#include "server/service.h"

#include "server/normalize_calls.h"
#include "server/normalize_stream.h"
#include "server/parameter_calls.h"

namespace normsvc::server {

grpc::ServerUnaryReactor* NormalizerService::Normalize(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return StartNormalize(context_, context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NormalizerService::NormalizeStream(
    grpc::CallbackServerContext* context) {
  return StartNormalizeStream(context_, context);
}

grpc::ServerUnaryReactor* NormalizerService::NormalizeBackward(
    grpc::CallbackServerContext* context, const v1::NormalizeBackwardRequest* request,
    v1::NormalizeBackwardResponse* response) {
  return StartNormalizeBackward(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::RegisterParameters(
    grpc::CallbackServerContext* context, const v1::RegisterParametersRequest* request,
    v1::RegisterParametersResponse* response) {
  return StartRegisterParameters(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::DeleteParameters(
    grpc::CallbackServerContext* context, const v1::DeleteParametersRequest* request,
    v1::DeleteParametersResponse* response) {
  return StartDeleteParameters(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::ListParameters(
    grpc::CallbackServerContext* context, const v1::ListParametersRequest* request,
    v1::ListParametersResponse* response) {
  return StartListParameters(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::GetServerInfo(grpc::CallbackServerContext* context,
                                                           const v1::GetServerInfoRequest* request,
                                                           v1::GetServerInfoResponse* response) {
  return StartGetServerInfo(context_, context, request, response);
}

}  // namespace normsvc::server
