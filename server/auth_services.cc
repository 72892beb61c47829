#include "server/auth_services.h"

#include "absl/time/clock.h"
#include "server/kserve_service.h"
#include "server/service.h"
#include "server/status_mapping.h"

namespace normsvc::server {
namespace {

// A stream refused before its first read.
template <typename Request, typename Response>
class RefusedStream final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RefusedStream(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::Status CallGuard::Check(grpc::CallbackServerContext* context, Method method) {
  const absl::Time start = absl::Now();
  absl::Status status = auth_.Check(context->client_metadata());
  if (!status.ok()) {
    metrics_.RecordRequest(method, std::nullopt, std::nullopt, status.code(), 0,
                           absl::ToDoubleSeconds(absl::Now() - start));
  }
  return status;
}

grpc::ServerUnaryReactor* CallGuard::RefuseUnary(grpc::CallbackServerContext* context,
                                                 Method method) {
  const absl::Status status = Check(context, method);
  if (status.ok()) return nullptr;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

template <typename Request, typename Response>
grpc::ServerBidiReactor<Request, Response>* CallGuard::RefuseStream(
    grpc::CallbackServerContext* context, Method method) {
  const absl::Status status = Check(context, method);
  if (status.ok()) return nullptr;
  return new RefusedStream<Request, Response>(ToGrpcStatus(status));
}

// ---- normsvc.v1.Normalizer

grpc::ServerUnaryReactor* AuthenticatedNormalizer::Normalize(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* request,
                                                             grpc::ByteBuffer* response) {
  if (auto* refused = guard_.RefuseUnary(context, Method::kNormalize)) {
    return refused;
  }
  return inner_.Normalize(context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
AuthenticatedNormalizer::NormalizeStream(grpc::CallbackServerContext* context) {
  if (auto* refused = guard_.RefuseStream<grpc::ByteBuffer, grpc::ByteBuffer>(
          context, Method::kNormalizeStream)) {
    return refused;
  }
  return inner_.NormalizeStream(context);
}

grpc::ServerUnaryReactor* AuthenticatedNormalizer::NormalizeBackward(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (auto* refused = guard_.RefuseUnary(context, Method::kNormalizeBackward)) {
    return refused;
  }
  return inner_.NormalizeBackward(context, request, response);
}

grpc::ServerUnaryReactor* AuthenticatedNormalizer::RegisterParameters(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (auto* refused = guard_.RefuseUnary(context, Method::kRegisterParameters)) {
    return refused;
  }
  return inner_.RegisterParameters(context, request, response);
}

grpc::ServerUnaryReactor* AuthenticatedNormalizer::DeleteParameters(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (auto* refused = guard_.RefuseUnary(context, Method::kDeleteParameters)) {
    return refused;
  }
  return inner_.DeleteParameters(context, request, response);
}

grpc::ServerUnaryReactor* AuthenticatedNormalizer::ListParameters(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (auto* refused = guard_.RefuseUnary(context, Method::kListParameters)) {
    return refused;
  }
  return inner_.ListParameters(context, request, response);
}

grpc::ServerUnaryReactor* AuthenticatedNormalizer::GetServerInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (auto* refused = guard_.RefuseUnary(context, Method::kGetServerInfo)) {
    return refused;
  }
  return inner_.GetServerInfo(context, request, response);
}

// ---- inference.GRPCInferenceService

#define NORMSVC_AUTHENTICATED_KSERVE_UNARY(Rpc)                                              \
  grpc::ServerUnaryReactor* AuthenticatedKserve::Rpc(grpc::CallbackServerContext* context,   \
                                                     const inference::Rpc##Request* request, \
                                                     inference::Rpc##Response* response) {   \
    if (auto* refused = guard_.RefuseUnary(context, Method::k##Rpc)) {                       \
      return refused;                                                                        \
    }                                                                                        \
    return inner_.Rpc(context, request, response);                                           \
  }

NORMSVC_AUTHENTICATED_KSERVE_UNARY(ServerLive)
NORMSVC_AUTHENTICATED_KSERVE_UNARY(ServerReady)
NORMSVC_AUTHENTICATED_KSERVE_UNARY(ModelReady)
NORMSVC_AUTHENTICATED_KSERVE_UNARY(ServerMetadata)
NORMSVC_AUTHENTICATED_KSERVE_UNARY(ModelMetadata)
NORMSVC_AUTHENTICATED_KSERVE_UNARY(ModelConfig)
NORMSVC_AUTHENTICATED_KSERVE_UNARY(ModelStatistics)
#undef NORMSVC_AUTHENTICATED_KSERVE_UNARY

grpc::ServerUnaryReactor* AuthenticatedKserve::ModelInfer(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  if (auto* refused = guard_.RefuseUnary(context, Method::kModelInfer)) {
    return refused;
  }
  return inner_.ModelInfer(context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* AuthenticatedKserve::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  if (auto* refused = guard_.RefuseStream<grpc::ByteBuffer, grpc::ByteBuffer>(
          context, Method::kModelStreamInfer)) {
    return refused;
  }
  return inner_.ModelStreamInfer(context);
}

}  // namespace normsvc::server
