#include "server/kserve_infer.h"

#include <atomic>
#include <memory>

#include <grpcpp/server_context.h>

#include "server/kserve_request.h"
#include "server/raw_message.h"
#include "server/status_mapping.h"
#include "server/task_builder.h"

namespace normsvc::server {

void KserveInference::RunInference(inference::ModelInferRequest* request,
                                   inference::ModelInferResponse* response, absl::Time deadline,
                                   const absl::Status& received) {
  request_ = request;
  response_ = response;
  timing_ = KserveInferTiming{};
  timing_.received = absl::Now();
  entered_ = false;
  refused_for_drain_ = false;
  model_name_ = request->model_name();
  dtype_.reset();
  for (const auto& input : request->inputs()) {
    if (input.name() == kKserveInput) dtype_ = KserveDatatypeFromName(input.datatype());
  }
  normalize_request_.Clear();
  normalize_response_.Clear();
  if (!service_.gate->TryEnter()) {
    refused_for_drain_ = true;
    return Complete(ShuttingDown());
  }
  entered_ = true;
  if (!received.ok()) return Complete(received);
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
  // The task's memory is reserved before BuildForwardTask allocates (and
  // zeroes) the reply's tensors, so that a request the budget cannot take is
  // refused before that; the task then goes to its batcher with it
  // (Task::memory_prepaid).
  absl::StatusOr<MemoryReservation> reserved =
      service_.pool->ReserveMemory(ForwardTaskBytesOf(*plan).memory(), deadline);
  if (!reserved.ok()) return Complete(reserved.status());
  MemoryReservation prepaid = *std::move(reserved);
  std::unique_ptr<Task> task =
      BuildForwardTask(*plan, normalize_request_, &normalize_response_, deadline, this);
  timing_.accepted = absl::Now();
  if (timing_.rows == 0) {  // nothing to compute
    task.reset();
    prepaid.ShrinkTo(0);
    return Complete(absl::OkStatus());
  }
  const absl::Status status = service_.pool->Schedule(task, std::move(prepaid));
  // On OK the task may already be finished and OnInferenceDone called.
  if (!status.ok()) {
    task.reset();
    Complete(status);
  }
}

void KserveInference::OnTaskDone(const absl::Status& status) { Complete(status); }

void KserveInference::Complete(const absl::Status& status) {
  timing_.completed = absl::Now();
  if (status.ok()) ToModelInferResponse(model_, *request_, &normalize_response_, response_);
  timing_.replied = absl::Now();
  timing_.ok = status.ok();
  // Only names of models that exist get statistics, and entries of models
  // that are gone are dropped as new ones come (the map stays bounded).
  const bool known_model = !model_name_.empty() && model_.name == model_name_;
  if (known_model) {
    const ParameterStore& store = *service_.store;
    statistics_.Record(model_name_, timing_, [&store](const std::string& name) {
      return ResolveKserveModel(name, "", store).ok();
    });
  }
  service_.metrics->RecordRequest(method_, known_model ? std::optional(model_.op) : std::nullopt,
                                  dtype_, status.code(), timing_.rows,
                                  absl::ToDoubleSeconds(timing_.replied - timing_.received));
  model_ = KserveModel{};  // drops the parameter set reference
  if (entered_) service_.gate->Exit();
  OnInferenceDone(status);
}

namespace {

// A unary ModelInfer. Deleted in OnDone, which gRPC runs after Finish.
class KserveInferCall final : public grpc::ServerUnaryReactor, public KserveInference {
 public:
  // The request is parsed from gRPC's received bytes, and the response
  // serialized into `sent` when the run is done (a raw method,
  // raw_message.h).
  KserveInferCall(ServiceContext& service, KserveStatistics& statistics,
                  const grpc::ByteBuffer* received, grpc::ByteBuffer* sent)
      : KserveInference(service, statistics, Method::kModelInfer), sent_(sent) {
    // gRPC holds the received bytes until the call ends; parsing consumes them.
    parsed_ = ParseMessageBytes(const_cast<grpc::ByteBuffer*>(received), &request_message_);
    constructed_.store(true, std::memory_order_release);
  }

  // Runs the request, or answers at once when it did not parse.
  void Start(absl::Time deadline) {
    RunInference(&request_message_, &response_message_, deadline, parsed_);
  }

  void OnCancel() override {
    // Orders the construction before this, for ThreadSanitizer, as
    // normalize_calls.cc's TensorCall does (gRPC's core keeps the order).
    constructed_.load(std::memory_order_acquire);
    MarkCancelled();
    cancel_seen_.store(true, std::memory_order_release);
  }
  void OnDone() override {
    // See finished_; OnCancel, when gRPC ran it, came before too.
    finished_.load(std::memory_order_acquire);
    cancel_seen_.load(std::memory_order_acquire);
    delete this;
  }
  // Trivial, lock-free reactions: gRPC may run them inline where the call
  // completes rather than on its executor (as normalize_calls.cc's
  // TensorCall does).
  bool InternalInlineable() override { return true; }

 private:
  void OnInferenceDone(const absl::Status& done) override {
    absl::Status status = done;
    if (status.ok() && !SerializeMessageBytes(response_message_, sent_)) {
      status = absl::InternalError("the response could not be serialized");
    }
    finished_.store(true, std::memory_order_release);
    Finish(ToGrpcStatus(status));
  }

  grpc::ByteBuffer* const sent_;  // gRPC's; written once, by OnInferenceDone
  inference::ModelInferRequest request_message_;
  inference::ModelInferResponse response_message_;
  absl::Status parsed_;

  // Hands what the finishing thread wrote (the response, this object) to
  // the thread that runs OnDone. gRPC orders Finish before OnDone in its
  // core already; this states the order in C++ terms, where
  // ThreadSanitizer sees it.
  std::atomic<bool> finished_{false};
  std::atomic<bool> cancel_seen_{false};
  std::atomic<bool> constructed_{false};  // construction -> OnCancel, as finished_
};

}  // namespace

grpc::ServerUnaryReactor* StartKserveModelInfer(ServiceContext& service,
                                                KserveStatistics& statistics,
                                                grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  auto* call = new KserveInferCall(service, statistics, request, response);
  call->Start(DeadlineOf(context->deadline()));
  return call;
}

}  // namespace normsvc::server
