#include "server/kserve_service.h"

#include "inference/model_config.pb.h"
#include "server/kserve_infer.h"
#include "server/kserve_models.h"
#include "server/kserve_stream.h"
#include "server/status_mapping.h"

namespace normsvc::server {

grpc::ServerUnaryReactor* KserveService::Answer(grpc::CallbackServerContext* context, Method method,
                                                absl::Time start, const absl::Status& status) {
  context_.metrics->RecordRequest(method, std::nullopt, std::nullopt, status.code(), 0,
                                  SecondsSince(start));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* KserveService::ServerLive(grpc::CallbackServerContext* context,
                                                    const inference::ServerLiveRequest*,
                                                    inference::ServerLiveResponse* response) {
  const absl::Time start = absl::Now();
  response->set_live(true);
  return Answer(context, Method::kServerLive, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ServerReady(grpc::CallbackServerContext* context,
                                                     const inference::ServerReadyRequest*,
                                                     inference::ServerReadyResponse* response) {
  const absl::Time start = absl::Now();
  response->set_ready(!context_.gate->draining());
  return Answer(context, Method::kServerReady, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ModelReady(grpc::CallbackServerContext* context,
                                                    const inference::ModelReadyRequest* request,
                                                    inference::ModelReadyResponse* response) {
  const absl::Time start = absl::Now();
  const auto model = ResolveKserveModel(request->name(), request->version(), *context_.store);
  if (!model.ok() && absl::IsNotFound(model.status()))
    return Answer(context, Method::kModelReady, start, model.status());
  response->set_ready(model.ok() && !context_.gate->draining());
  return Answer(context, Method::kModelReady, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  const absl::Time start = absl::Now();
  response->set_name("normsvc");
  response->set_version(context_.server_info.version());
  for (const char* extension : {"model_configuration", "statistics", "parameters"}) {
    response->add_extensions(extension);
  }
  return Answer(context, Method::kServerMetadata, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  const absl::Time start = absl::Now();
  const auto model = ResolveKserveModel(request->name(), request->version(), *context_.store);
  if (!model.ok()) return Answer(context, Method::kModelMetadata, start, model.status());
  DescribeKserveModel(*model, response);
  return Answer(context, Method::kModelMetadata, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ModelConfig(grpc::CallbackServerContext* context,
                                                     const inference::ModelConfigRequest* request,
                                                     inference::ModelConfigResponse* response) {
  const absl::Time start = absl::Now();
  const auto model = ResolveKserveModel(request->name(), request->version(), *context_.store);
  if (!model.ok()) return Answer(context, Method::kModelConfig, start, model.status());
  ConfigureKserveModel(*model, response->mutable_config());
  return Answer(context, Method::kModelConfig, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  const absl::Time start = absl::Now();
  if (request->name().empty()) {
    for (const KserveModel& model : ListKserveModels(*context_.store)) {
      statistics_.Fill(model.name, response->add_model_stats());
    }
    return Answer(context, Method::kModelStatistics, start, absl::OkStatus());
  }
  const auto model = ResolveKserveModel(request->name(), request->version(), *context_.store);
  if (!model.ok()) return Answer(context, Method::kModelStatistics, start, model.status());
  statistics_.Fill(model->name, response->add_model_stats());
  return Answer(context, Method::kModelStatistics, start, absl::OkStatus());
}

grpc::ServerUnaryReactor* KserveService::ModelInfer(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return StartKserveModelInfer(context_, statistics_, context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KserveService::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  return StartKserveModelStreamInfer(context_, statistics_, streams_, context);
}

}  // namespace normsvc::server
