// inference.GRPCInferenceService (the open inference protocol, KServe v2 /
// Triton) on the callback API, on the same port and the same batcher as
// normsvc.v1.Normalizer. Health, metadata, configuration and statistics
// are answered in the handler; ModelInfer and ModelStreamInfer go through
// kserve_infer / kserve_stream. RPCs of the protocol that normsvc does not
// declare (repository, shared memory, trace, logging) answer UNIMPLEMENTED.
#pragma once

#include "inference/grpc_service.grpc.pb.h"
#include "server/kserve_statistics.h"
#include "server/kserve_stream.h"
#include "server/metrics.h"
#include "server/service_context.h"

namespace normsvc::server {

// The protocol's service with ModelInfer and ModelStreamInfer as raw
// methods: they get each message's bytes and parse them (raw_message.h), so
// that a malformed message is answered INVALID_ARGUMENT instead of gRPC's
// UNIMPLEMENTED or an end of the stream. The other methods take and return
// messages.
using KserveCallbackBase = inference::GRPCInferenceService::WithCallbackMethod_ServerLive<
    inference::GRPCInferenceService::WithCallbackMethod_ServerReady<
        inference::GRPCInferenceService::WithCallbackMethod_ModelReady<
            inference::GRPCInferenceService::WithCallbackMethod_ServerMetadata<
                inference::GRPCInferenceService::WithCallbackMethod_ModelMetadata<
                    inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
                        inference::GRPCInferenceService::WithRawCallbackMethod_ModelStreamInfer<
                            inference::GRPCInferenceService::WithCallbackMethod_ModelConfig<
                                inference::GRPCInferenceService::WithCallbackMethod_ModelStatistics<
                                    inference::GRPCInferenceService::Service>>>>>>>>>;

// The overrides of every KServe method, for KserveService and its
// authenticated wrapper (auth_services.h); the using-declarations keep the
// base's synchronous overloads of ModelInfer and ModelStreamInfer visible.
#define NORMSVC_KSERVE_METHODS                                                                    \
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,                      \
                                       const inference::ServerLiveRequest* request,               \
                                       inference::ServerLiveResponse* response) override;         \
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,                     \
                                        const inference::ServerReadyRequest* request,             \
                                        inference::ServerReadyResponse* response) override;       \
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,                      \
                                       const inference::ModelReadyRequest* request,               \
                                       inference::ModelReadyResponse* response) override;         \
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,                  \
                                           const inference::ServerMetadataRequest* request,       \
                                           inference::ServerMetadataResponse* response) override; \
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,                   \
                                          const inference::ModelMetadataRequest* request,         \
                                          inference::ModelMetadataResponse* response) override;   \
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,                     \
                                        const inference::ModelConfigRequest* request,             \
                                        inference::ModelConfigResponse* response) override;       \
  grpc::ServerUnaryReactor* ModelStatistics(                                                      \
      grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,     \
      inference::ModelStatisticsResponse* response) override;                                     \
  using KserveCallbackBase::ModelInfer;                                                           \
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,                      \
                                       const grpc::ByteBuffer* request,                           \
                                       grpc::ByteBuffer* response) override;                      \
  using KserveCallbackBase::ModelStreamInfer;                                                     \
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(                  \
      grpc::CallbackServerContext* context) override;

class KserveService final : public KserveCallbackBase {
 public:
  explicit KserveService(ServiceContext& context) : context_(context) {}

  NORMSVC_KSERVE_METHODS

  // Part of the server's drain: open ModelStreamInfer streams finish
  // (UNAVAILABLE) now if idle, else after their reply.
  void DrainStreams() { streams_.DrainAll(); }
  // After gRPC's shutdown: waits until every stream has run OnDone (see
  // CallRegistry::WaitUntilEmpty); false when some are still open.
  bool WaitForStreams(absl::Time deadline) { return streams_.WaitUntilEmpty(deadline); }

 private:
  // Records the call in the request metrics and answers it.
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, Method method,
                                   absl::Time start, const absl::Status& status);

  ServiceContext& context_;
  KserveStatistics statistics_;
  CallRegistry streams_;
};

}  // namespace normsvc::server
