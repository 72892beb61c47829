// The Normalizer service on gRPC's callback API: thin handlers that hand
// each call to its reactor (normalize_calls, normalize_stream,
// parameter_calls). Handlers never block and never touch CUDA.
#pragma once

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/service_context.h"

namespace normsvc::server {

// The Normalizer service with every method raw: each handler gets the
// request's bytes and writes the response's (raw_message.h), so that a
// message that does not parse is answered INVALID_ARGUMENT (gRPC's typed
// handlers answer UNIMPLEMENTED, or end a stream as if the client had),
// and Normalize parses and encodes its tensors without copies
// (received_request.h, wire_response.h). Every RPC of the proto must be
// listed here and below: one left out would be a synchronous method, which
// this server does not run (security_auth_test calls every RPC of the
// service descriptor and fails on it).
using NormalizerCallbackBase = v1::Normalizer::WithRawCallbackMethod_Normalize<
    v1::Normalizer::WithRawCallbackMethod_NormalizeStream<
        v1::Normalizer::WithRawCallbackMethod_NormalizeBackward<
            v1::Normalizer::WithRawCallbackMethod_RegisterParameters<
                v1::Normalizer::WithRawCallbackMethod_DeleteParameters<
                    v1::Normalizer::WithRawCallbackMethod_ListParameters<
                        v1::Normalizer::WithRawCallbackMethod_GetServerInfo<
                            v1::Normalizer::Service>>>>>>>;

// The overrides of every raw method, for NormalizerService and its
// authenticated wrapper (auth_services.h); the using-declarations keep the
// base's synchronous overloads of the same names visible.
#define NORMSVC_NORMALIZER_RAW_METHODS                                                             \
  using NormalizerCallbackBase::Normalize;                                                         \
  using NormalizerCallbackBase::NormalizeStream;                                                   \
  using NormalizerCallbackBase::NormalizeBackward;                                                 \
  using NormalizerCallbackBase::RegisterParameters;                                                \
  using NormalizerCallbackBase::DeleteParameters;                                                  \
  using NormalizerCallbackBase::ListParameters;                                                    \
  using NormalizerCallbackBase::GetServerInfo;                                                     \
  grpc::ServerUnaryReactor* Normalize(grpc::CallbackServerContext* context,                        \
                                      const grpc::ByteBuffer* request, grpc::ByteBuffer* response) \
      override;                                                                                    \
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NormalizeStream(                    \
      grpc::CallbackServerContext* context) override;                                              \
  grpc::ServerUnaryReactor* NormalizeBackward(grpc::CallbackServerContext* context,                \
                                              const grpc::ByteBuffer* request,                     \
                                              grpc::ByteBuffer* response) override;                \
  grpc::ServerUnaryReactor* RegisterParameters(grpc::CallbackServerContext* context,               \
                                               const grpc::ByteBuffer* request,                    \
                                               grpc::ByteBuffer* response) override;               \
  grpc::ServerUnaryReactor* DeleteParameters(grpc::CallbackServerContext* context,                 \
                                             const grpc::ByteBuffer* request,                      \
                                             grpc::ByteBuffer* response) override;                 \
  grpc::ServerUnaryReactor* ListParameters(grpc::CallbackServerContext* context,                   \
                                           const grpc::ByteBuffer* request,                        \
                                           grpc::ByteBuffer* response) override;                   \
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,                    \
                                          const grpc::ByteBuffer* request,                         \
                                          grpc::ByteBuffer* response) override;

class NormalizerService final : public NormalizerCallbackBase {
 public:
  explicit NormalizerService(ServiceContext& context) : context_(context) {}

  NORMSVC_NORMALIZER_RAW_METHODS

 private:
  ServiceContext& context_;
};

}  // namespace normsvc::server
