// The Normalizer service on gRPC's callback API: thin handlers that hand
// each call to its reactor (normalize_calls, normalize_stream,
// parameter_calls). Handlers never block and never touch CUDA.
#pragma once

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/service_context.h"

namespace normsvc::server {

// The Normalizer service with Normalize and NormalizeStream as raw methods:
// their handlers get the requests' bytes and parse them (normalize_calls.h,
// normalize_stream.h), so a malformed message is answered as one instead of
// looking like the end of the stream. The other methods take and return
// messages.
using NormalizerCallbackBase = v1::Normalizer::WithRawCallbackMethod_Normalize<
    v1::Normalizer::WithRawCallbackMethod_NormalizeStream<
        v1::Normalizer::WithCallbackMethod_NormalizeBackward<
            v1::Normalizer::WithCallbackMethod_RegisterParameters<
                v1::Normalizer::WithCallbackMethod_DeleteParameters<
                    v1::Normalizer::WithCallbackMethod_ListParameters<
                        v1::Normalizer::WithCallbackMethod_GetServerInfo<
                            v1::Normalizer::Service>>>>>>>;

class NormalizerService final : public NormalizerCallbackBase {
 public:
  explicit NormalizerService(ServiceContext& context) : context_(context) {}

  using NormalizerCallbackBase::Normalize;
  grpc::ServerUnaryReactor* Normalize(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  using NormalizerCallbackBase::NormalizeStream;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NormalizeStream(
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
