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

grpc::ServerUnaryReactor* NormalizerService::NormalizeBackward(grpc::CallbackServerContext* context,
                                                               const grpc::ByteBuffer* request,
                                                               grpc::ByteBuffer* response) {
  return StartNormalizeBackward(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::RegisterParameters(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return StartRegisterParameters(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::DeleteParameters(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  return StartDeleteParameters(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::ListParameters(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return StartListParameters(context_, context, request, response);
}

grpc::ServerUnaryReactor* NormalizerService::GetServerInfo(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return StartGetServerInfo(context_, context, request, response);
}

}  // namespace normsvc::server
