#include "server/kserve_infer.h"

#include <memory>

#include <grpcpp/server_context.h>

#include "server/kserve_request.h"
#include "server/status_mapping.h"
#include "server/task_builder.h"

namespace normsvc::server {

void KserveInference::RunInference(const inference::ModelInferRequest* request,
                                   inference::ModelInferResponse* response, absl::Time deadline) {
  request_ = request;
  response_ = response;
  start_ = absl::Now();
  timing_ = KserveInferTiming{};
  entered_ = false;
  refused_for_drain_ = false;
  model_name_ = request->model_name();
  normalize_request_.Clear();
  normalize_response_.Clear();
  if (!service_.gate->TryEnter()) {
    refused_for_drain_ = true;
    return Complete(ShuttingDown());
  }
  entered_ = true;
  absl::StatusOr<KserveModel> model =
      ResolveKserveModel(request->model_name(), request->model_version(), *service_.store);
  if (!model.ok()) return Complete(model.status());
  model_ = *std::move(model);
  if (absl::Status status = ToNormalizeRequest(model_, *request, &normalize_request_);
      !status.ok()) {
    return Complete(status);
  }
  auto plan = ValidateNormalize(normalize_request_, service_.limits, *service_.store);
  if (!plan.ok()) return Complete(ToKserveError(model_, plan.status()));
  timing_.rows = plan->input.rows;
  std::unique_ptr<Task> task =
      BuildForwardTask(*plan, normalize_request_, &normalize_response_, deadline, this);
  scheduled_at_ = absl::Now();
  timing_.input = scheduled_at_ - start_;
  if (timing_.rows == 0) return Complete(absl::OkStatus());  // nothing to compute
  const absl::Status status = service_.pool->Schedule(task);
  // On OK the task may already be finished and OnInferenceDone called.
  if (!status.ok()) {
    task.reset();
    Complete(status);
  }
}

void KserveInference::OnTaskDone(const absl::Status& status) {
  timing_.infer = absl::Now() - scheduled_at_;
  Complete(status);
}

void KserveInference::Complete(const absl::Status& status) {
  const absl::Time output_start = absl::Now();
  if (status.ok()) ToModelInferResponse(model_, *request_, &normalize_response_, response_);
  timing_.finished_at = absl::Now();
  timing_.output = timing_.finished_at - output_start;
  timing_.total = timing_.finished_at - start_;
  timing_.ok = status.ok();
  // Only names of models that exist get statistics (the map stays bounded).
  if (!model_name_.empty() && model_.name == model_name_) {
    statistics_.Record(model_name_, timing_);
  }
  model_ = KserveModel{};  // drops the parameter set reference
  if (entered_) service_.gate->Exit();
  OnInferenceDone(status);
}

namespace {

// A unary ModelInfer. Deleted in OnDone, which gRPC runs after Finish.
class KserveInferCall final : public grpc::ServerUnaryReactor, public KserveInference {
 public:
  KserveInferCall(ServiceContext& service, KserveStatistics& statistics)
      : KserveInference(service, statistics) {}

  void OnCancel() override { MarkCancelled(); }
  void OnDone() override { delete this; }

 private:
  void OnInferenceDone(const absl::Status& status) override { Finish(ToGrpcStatus(status)); }
};

}  // namespace

grpc::ServerUnaryReactor* StartKserveModelInfer(ServiceContext& service,
                                                KserveStatistics& statistics,
                                                grpc::CallbackServerContext* context,
                                                const inference::ModelInferRequest* request,
                                                inference::ModelInferResponse* response) {
  auto* call = new KserveInferCall(service, statistics);
  call->RunInference(request, response, DeadlineOf(context->deadline()));
  return call;
}

}  // namespace normsvc::server
