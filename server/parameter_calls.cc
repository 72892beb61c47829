#include "server/parameter_calls.h"

#include <atomic>

#include <grpcpp/server_context.h>

#include "server/raw_message.h"
#include "server/received_request.h"
#include "server/status_mapping.h"
#include "server/tensor_codec.h"

namespace normsvc::server {
namespace {

// How a control-plane call reads its request from the bytes gRPC received
// (taking them over): RegisterParameters' tensors stay in gRPC's buffers
// until the request is valid (received_request.h); the others are small
// and protobuf parses them.
template <typename Message>
absl::Status ParseRequestBytes(grpc::ByteBuffer* bytes, Message* request) {
  return ParseMessageBytes(bytes, request);
}
absl::Status ParseRequestBytes(grpc::ByteBuffer* bytes, ReceivedRegisterRequest* request) {
  return ParseReceivedRegisterRequest(bytes, request);
}

// A control-plane call: enters the drain gate, replies once, deletes
// itself in OnDone. It owns its request and response, parsed from and
// serialized into the bytes gRPC received and sends.
template <typename Request, typename Response>
class ControlCall final : public grpc::ServerUnaryReactor {
 public:
  ControlCall(ServiceContext& service, Method method, const grpc::ByteBuffer* request_bytes,
              grpc::ByteBuffer* response_bytes)
      : service_(service), method_(method), response_bytes_(response_bytes) {
    // The received bytes are gRPC's, held until the call ends; parsing
    // consumes them.
    parsed_ = ParseRequestBytes(const_cast<grpc::ByteBuffer*>(request_bytes), &request_);
  }

  const Request& request() const { return request_; }
  Request& mutable_request() { return request_; }
  Response* response() { return &response_; }

  // False (and already answered) while draining or when the request did
  // not parse.
  bool Enter() {
    if (!service_.gate->TryEnter()) {
      Reply(ShuttingDown());
      return false;
    }
    entered_ = true;
    if (!parsed_.ok()) {
      Reply(parsed_);
      return false;
    }
    return true;
  }

  void Reply(absl::Status status) {
    if (status.ok() && !SerializeMessageBytes(response_, response_bytes_)) {
      status = absl::InternalError("the response could not be serialized");
    }
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
  grpc::ByteBuffer* const response_bytes_;  // gRPC's; written once, by Reply
  Request request_;
  Response response_;
  absl::Status parsed_;
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
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  auto* call = new ControlCall<ReceivedRegisterRequest, v1::RegisterParametersResponse>(
      service, Method::kRegisterParameters, request, response);
  if (!call->Enter()) return call;
  // Checked on the received pieces, copied into the message once valid.
  ReceivedRegisterRequest& received = call->mutable_request();
  if (absl::Status st =
          CheckRegisterParameters(received.message, received.tensor_data(), service.limits);
      !st.ok()) {
    call->Reply(st);
    return call;
  }
  received.CopyDataIntoMessage();
  absl::StatusOr<RegisterPlan> plan = ValidateRegisterParameters(received.message, service.limits);
  if (!plan.ok()) {
    call->Reply(plan.status());
    return call;
  }
  call->RunOnControlThread([call, &service, plan = *plan] {
    absl::StatusOr<std::shared_ptr<const ParameterSet>> set =
        service.store->Register(std::string(plan.name), plan.hidden, plan.dtype, plan.gamma,
                                plan.beta, call->request().message.replace());
    if (set.ok()) FillInfo(**set, call->response()->mutable_info());
    call->Reply(set.status());
  });
  return call;
}

grpc::ServerUnaryReactor* StartDeleteParameters(ServiceContext& service,
                                                grpc::CallbackServerContext* /*context*/,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  auto* call = new ControlCall<v1::DeleteParametersRequest, v1::DeleteParametersResponse>(
      service, Method::kDeleteParameters, request, response);
  if (!call->Enter()) return call;
  if (absl::Status status = ValidateParameterSetName(call->request().name(), "name");
      !status.ok()) {
    call->Reply(status);
    return call;
  }
  call->RunOnControlThread(
      [call, &service] { call->Reply(service.store->Delete(call->request().name())); });
  return call;
}

grpc::ServerUnaryReactor* StartListParameters(ServiceContext& service,
                                              grpc::CallbackServerContext* /*context*/,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  auto* call = new ControlCall<v1::ListParametersRequest, v1::ListParametersResponse>(
      service, Method::kListParameters, request, response);
  if (!call->Enter()) return call;
  for (const auto& set : service.store->List()) {
    FillInfo(*set, call->response()->add_parameter_sets());
  }
  call->Reply(absl::OkStatus());
  return call;
}

grpc::ServerUnaryReactor* StartGetServerInfo(ServiceContext& service,
                                             grpc::CallbackServerContext* /*context*/,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) {
  auto* call = new ControlCall<v1::GetServerInfoRequest, v1::GetServerInfoResponse>(
      service, Method::kGetServerInfo, request, response);
  if (!call->Enter()) return call;
  *call->response() = service.server_info;
  call->Reply(absl::OkStatus());
  return call;
}

}  // namespace normsvc::server
