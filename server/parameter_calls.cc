#include "server/parameter_calls.h"

#include <atomic>

#include <grpcpp/server_context.h>

#include "server/status_mapping.h"
#include "server/tensor_codec.h"

namespace normsvc::server {
namespace {

// A control-plane call: enters the drain gate, replies once, deletes
// itself in OnDone.
class ControlCall final : public grpc::ServerUnaryReactor {
 public:
  ControlCall(ServiceContext& service, Method method) : service_(service), method_(method) {}

  // False (and already answered UNAVAILABLE) while draining.
  bool Enter() {
    if (service_.gate->TryEnter()) {
      entered_ = true;
      return true;
    }
    Reply(ShuttingDown());
    return false;
  }

  void Reply(const absl::Status& status) {
    service_.metrics->RecordRequest(method_, std::nullopt, std::nullopt, status.code(), 0,
                                    SecondsSince(start_));
    DrainGate* gate = entered_ ? service_.gate : nullptr;
    finished_.store(true, std::memory_order_release);
    Finish(ToGrpcStatus(status));
    if (gate != nullptr) gate->Exit();
  }

  // Runs `job` on the control thread; answers at once if it cannot be queued.
  template <typename Job>
  void RunOnControlThread(Job job) {
    if (!service_.control->Post(std::move(job))) {
      Reply(absl::ResourceExhaustedError("too many parameter operations queued; retry later"));
    }
  }

  void OnDone() override {
    finished_.load(std::memory_order_acquire);  // see finished_
    delete this;
  }

 private:
  ServiceContext& service_;
  const Method method_;
  const absl::Time start_ = absl::Now();
  bool entered_ = false;
  // Hands what the replying thread (often the control thread) read and
  // wrote, the request and response included, to the thread that runs
  // OnDone, after which gRPC frees them. gRPC orders Finish before OnDone in
  // its core already; this states the order in C++ terms, where
  // ThreadSanitizer sees it (as TensorCall does).
  std::atomic<bool> finished_{false};
};

void FillInfo(const ParameterSet& set, v1::ParameterSetInfo* info) {
  info->set_name(set.name);
  info->set_hidden_size(set.hidden);
  info->set_dtype(ToProtoDType(set.dtype));
  info->set_has_gamma(set.has_gamma);
  info->set_has_beta(set.has_beta);
  info->set_bytes(set.bytes);
}

}  // namespace

grpc::ServerUnaryReactor* StartRegisterParameters(ServiceContext& service,
                                                  grpc::CallbackServerContext* /*context*/,
                                                  const v1::RegisterParametersRequest* request,
                                                  v1::RegisterParametersResponse* response) {
  auto* call = new ControlCall(service, Method::kRegisterParameters);
  if (!call->Enter()) return call;
  absl::StatusOr<RegisterPlan> plan = ValidateRegisterParameters(*request, service.limits);
  if (!plan.ok()) {
    call->Reply(plan.status());
    return call;
  }
  call->RunOnControlThread([call, &service, request, response, plan = *plan] {
    absl::StatusOr<std::shared_ptr<const ParameterSet>> set = service.store->Register(
        std::string(plan.name), plan.hidden, plan.dtype, plan.gamma, plan.beta, request->replace());
    if (set.ok()) FillInfo(**set, response->mutable_info());
    call->Reply(set.status());
  });
  return call;
}

grpc::ServerUnaryReactor* StartDeleteParameters(ServiceContext& service,
                                                grpc::CallbackServerContext* /*context*/,
                                                const v1::DeleteParametersRequest* request,
                                                v1::DeleteParametersResponse* /*response*/) {
  auto* call = new ControlCall(service, Method::kDeleteParameters);
  if (!call->Enter()) return call;
  if (absl::Status status = ValidateParameterSetName(request->name(), "name"); !status.ok()) {
    call->Reply(status);
    return call;
  }
  call->RunOnControlThread(
      [call, &service, request] { call->Reply(service.store->Delete(request->name())); });
  return call;
}

grpc::ServerUnaryReactor* StartListParameters(ServiceContext& service,
                                              grpc::CallbackServerContext* /*context*/,
                                              const v1::ListParametersRequest* /*request*/,
                                              v1::ListParametersResponse* response) {
  auto* call = new ControlCall(service, Method::kListParameters);
  if (!call->Enter()) return call;
  for (const auto& set : service.store->List()) FillInfo(*set, response->add_parameter_sets());
  call->Reply(absl::OkStatus());
  return call;
}

grpc::ServerUnaryReactor* StartGetServerInfo(ServiceContext& service,
                                             grpc::CallbackServerContext* /*context*/,
                                             const v1::GetServerInfoRequest* /*request*/,
                                             v1::GetServerInfoResponse* response) {
  auto* call = new ControlCall(service, Method::kGetServerInfo);
  if (!call->Enter()) return call;
  *response = service.server_info;
  call->Reply(absl::OkStatus());
  return call;
}

}  // namespace normsvc::server
