// The Normalizer service on gRPC's callback API: thin handlers that hand
// each call to its reactor (normalize_calls, normalize_stream,
// parameter_calls). Handlers never block and never touch CUDA.
#pragma once

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/service_context.h"

namespace normsvc::server {

class NormalizerService final : public v1::Normalizer::CallbackService {
 public:
  explicit NormalizerService(ServiceContext& context) : context_(context) {}

  grpc::ServerUnaryReactor* Normalize(grpc::CallbackServerContext* context,
                                      const v1::NormalizeRequest* request,
                                      v1::NormalizeResponse* response) override;
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
