// The Normalizer service on gRPC's callback API: thin handlers that hand
// each call to its reactor (normalize_calls, normalize_stream,
// parameter_calls). Handlers never block and never touch CUDA.
#pragma once

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/service_context.h"

namespace normsvc::server {

// The Normalizer service with Normalize as a raw method: its handler gets
// the request's bytes and writes the response's (normalize_calls.h); the
// other methods take and return messages.
using NormalizerCallbackBase =
    v1::Normalizer::WithRawCallbackMethod_Normalize<v1::Normalizer::CallbackService>;

class NormalizerService final : public NormalizerCallbackBase {
 public:
  explicit NormalizerService(ServiceContext& context) : context_(context) {}

  using NormalizerCallbackBase::Normalize;
  grpc::ServerUnaryReactor* Normalize(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<v1::NormalizeRequest, v1::NormalizeStreamResponse>* NormalizeStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* NormalizeBackward(grpc::CallbackServerContext* context,
                                              const v1::NormalizeBackwardRequest* request,
                                              v1::NormalizeBackwardResponse* response) override;
  grpc::ServerUnaryReactor* RegisterParameters(grpc::CallbackServerContext* context,
                                               const v1::RegisterParametersRequest* request,
                                               v1::RegisterParametersResponse* response) override;
  grpc::ServerUnaryReactor* DeleteParameters(grpc::CallbackServerContext* context,
                                             const v1::DeleteParametersRequest* request,
                                             v1::DeleteParametersResponse* response) override;
  grpc::ServerUnaryReactor* ListParameters(grpc::CallbackServerContext* context,
                                           const v1::ListParametersRequest* request,
                                           v1::ListParametersResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::GetServerInfoResponse* response) override;

 private:
  ServiceContext& context_;
};

}  // namespace normsvc::server
