#include "server/normalize_calls.h"

#include <atomic>
#include <optional>

#include <grpcpp/server_context.h>

#include "server/raw_message.h"
#include "server/received_request.h"
#include "server/status_mapping.h"
#include "server/task_builder.h"
#include "server/tensor_codec.h"
#include "server/wire_response.h"

namespace normsvc::server {
namespace {

// Normalize: the request parsed by the call from the bytes gRPC received,
// its tensors left in gRPC's buffers (received_request.h), and the response
// encoded by hand into the bytes it sends (wire_response.h), so request
// bytes reach the executor's staging memory with one copy, and results the
// sent memory with one (or none: the CPU executor writes there).
struct ForwardTraits {
  using Request = ReceivedNormalizeRequest;
  struct Response {
    grpc::ByteBuffer* sent;  // gRPC's, written once: when the task is built
    WireResponse wire;
  };
  static constexpr Method kMethod = Method::kNormalize;
  static const v1::NormalizeRequest& Message(const Request& request) { return request.message; }
  static void SetRequestId(Response& response, uint64_t id) { response.wire.set_request_id(id); }
  // The task's memory is acquired when it is scheduled: its tensors stay in
  // gRPC's buffers and its reply's slices are not touched before then.
  static auto Validate(const Request& request, const ServiceContext& service,
                       absl::Time /*deadline*/, MemoryReservation* /*prepaid*/) {
    return ValidateNormalize(request.message, request.tensor_data(), service.limits,
                             *service.store);
  }
  static std::unique_ptr<Task> Build(const ForwardPlan& plan, const Request& request,
                                     Response& response, absl::Time deadline, TaskSink* sink) {
    std::unique_ptr<Task> task =
        BuildForwardTask(plan, request.message, response.wire, deadline, sink);
    // The buffer shares the tensors' memory, which the executor fills later.
    *response.sent = response.wire.TakeBuffer();
    return task;
  }
  // The bytes are already in place (Build).
  static absl::Status Send(Response& /*response*/) { return absl::OkStatus(); }
};

// NormalizeBackward: the request parsed by the call from the bytes gRPC
// received and validated with its tensors still in gRPC's buffers, then
// copied into the message once valid (the backward kernels read each tensor
// in one piece; received_request.h); the response serialized into the sent
// bytes when the task is done.
struct BackwardTraits {
  using Request = ReceivedBackwardRequest;
  struct Response {
    grpc::ByteBuffer* sent;  // gRPC's, written once: by Send
    v1::NormalizeBackwardResponse message;
  };
  static constexpr Method kMethod = Method::kNormalizeBackward;
  static const v1::NormalizeBackwardRequest& Message(const Request& request) {
    return request.message;
  }
  static void SetRequestId(Response& response, uint64_t id) { response.message.set_request_id(id); }
  // The copy of the tensors into the message and the reply (allocated and
  // zeroed by Build) come only after the task's memory is reserved in the
  // budget: a request the budget cannot take, or whose deadline has passed,
  // is refused before either.
  static absl::StatusOr<BackwardPlan> Validate(Request& request, const ServiceContext& service,
                                               absl::Time deadline, MemoryReservation* prepaid) {
    absl::StatusOr<BackwardPlan> checked = CheckNormalizeBackward(
        request.message, request.tensor_data(), service.limits, *service.store);
    if (!checked.ok()) return checked.status();
    absl::StatusOr<MemoryReservation> reserved =
        service.pool->ReserveMemory(BackwardTaskBytesOf(*checked).memory(), deadline);
    if (!reserved.ok()) return reserved.status();
    *prepaid = *std::move(reserved);
    request.CopyDataIntoMessage();
    return ValidateNormalizeBackward(request.message, service.limits, *service.store);
  }
  static std::unique_ptr<Task> Build(const BackwardPlan& plan, const Request& request,
                                     Response& response, absl::Time deadline, TaskSink* sink) {
    return BuildBackwardTask(plan, request.message, &response.message, deadline, sink);
  }
  static absl::Status Send(Response& response) {
    return SerializeMessageBytes(response.message, response.sent)
               ? absl::OkStatus()
               : absl::InternalError("the response could not be serialized");
  }
};

// One unary tensor call. Lifetime: created by the handler, deleted in
// OnDone, which gRPC runs only after Finish; Finish is called exactly once
// (Reply), and nothing touches `this` after it. The request is the call's
// own, parsed from the received bytes, and lives until OnDone.
template <typename Traits>
class TensorCall final : public grpc::ServerUnaryReactor, public TaskSink {
 public:
  using Request = typename Traits::Request;
  using Response = typename Traits::Response;

  TensorCall(ServiceContext& service, grpc::CallbackServerContext* context,
             std::unique_ptr<Request> request, Response response)
      : service_(service),
        context_(context),
        request_(std::move(request)),
        response_(std::move(response)) {
    constructed_.store(true, std::memory_order_release);
  }

  // `received`: whether the request could be read (not OK: the reply).
  void Start(const absl::Status& received = absl::OkStatus()) {
    if (received.ok()) {  // else the metric's labels stay unknown
      op_ = FromProtoOp(Traits::Message(*request_).op());
      dtype_ = FromProtoDType(Traits::Message(*request_).input().dtype());
    }
    if (!service_.gate->TryEnter()) return Reply(ShuttingDown());
    entered_ = true;
    if (!received.ok()) return Reply(received);
    Traits::SetRequestId(response_, Traits::Message(*request_).request_id());
    // The task's memory when Validate reserved it (Task::memory_prepaid):
    // given back before any reply that ends the call here, or handed to the
    // batcher with the task.
    MemoryReservation prepaid;
    const absl::Time deadline = DeadlineOf(context_->deadline());
    auto plan = Traits::Validate(*request_, service_, deadline, &prepaid);
    if (!plan.ok()) {
      prepaid.ShrinkTo(0);
      return Reply(plan.status());
    }
    rows_ = plan->input.rows;
    std::unique_ptr<Task> task = Traits::Build(*plan, *request_, response_, deadline, this);
    if (rows_ == 0) {  // nothing to compute
      task.reset();
      prepaid.ShrinkTo(0);
      return Reply(absl::OkStatus());
    }
    const absl::Status status = service_.pool->Schedule(task, std::move(prepaid));
    // On OK the task may already be finished (Reply called from a batch
    // thread); `this` stays valid until the handler returns (gRPC holds the
    // call until SetupReactor), but nothing here touches it again.
    if (!status.ok()) {
      task.reset();
      Reply(status);
    }
  }

  bool IsCancelled() const override { return cancelled_.load(std::memory_order_relaxed); }
  // The request (whose receive slices the task read) and the response both
  // live until OnDone, after gRPC has sent the reply: the budget's share
  // goes with this object.
  void HoldUntilReplied(MemoryReservation reservation) override {
    reservation_ = std::move(reservation);
  }
  void OnTaskDone(const absl::Status& status) override { Reply(status); }
  // OnCancel and OnDone are trivial (an atomic store; delete this) and take
  // no lock, so gRPC may run them inline on whichever thread completes the
  // call, usually the batch or reply thread inside Finish, instead of
  // handing OnDone to its executor thread: one thread wake-up less a
  // request (CPU backend, 64 in flight: 1.37 -> 0.87 context switches a
  // request; server/README.md). Nothing touches `this` after Finish.
  bool InternalInlineable() override { return true; }
  void OnCancel() override {
    constructed_.load(std::memory_order_acquire);  // see constructed_
    cancelled_.store(true, std::memory_order_release);
  }
  void OnDone() override {
    // See finished_; OnCancel, when gRPC ran it, came before too.
    finished_.load(std::memory_order_acquire);
    cancelled_.load(std::memory_order_acquire);
    delete this;
  }

 private:
  void Reply(absl::Status status) {
    if (status.ok()) status = Traits::Send(response_);
    service_.metrics->RecordRequest(Traits::kMethod, op_, dtype_, status.code(), rows_,
                                    SecondsSince(start_));
    DrainGate* gate = entered_ ? service_.gate : nullptr;
    finished_.store(true, std::memory_order_release);
    Finish(ToGrpcStatus(status));
    if (gate != nullptr) gate->Exit();
  }

  ServiceContext& service_;
  grpc::CallbackServerContext* const context_;
  const std::unique_ptr<Request> request_;
  Response response_;
  const absl::Time start_ = absl::Now();
  std::optional<kernels::NormOp> op_;
  std::optional<kernels::DType> dtype_;
  int64_t rows_ = 0;
  bool entered_ = false;
  MemoryReservation reservation_;  // set on a batch thread before Reply
  std::atomic<bool> cancelled_{false};
  // Hands the constructed object to the thread that runs OnCancel. gRPC calls
  // OnCancel, on its own thread, only after the handler has returned this
  // reactor, an order kept inside gRPC's core; this states it in C++ terms,
  // where ThreadSanitizer sees it (it reported the construction and OnCancel's
  // store as a race under the overload soak).
  std::atomic<bool> constructed_{false};
  // Hands what the replying thread wrote (the response, this object) to the
  // thread that runs OnDone. gRPC orders Finish before OnDone in its core
  // already; this states the order in C++ terms, where ThreadSanitizer sees it.
  std::atomic<bool> finished_{false};
};

}  // namespace

grpc::ServerUnaryReactor* StartNormalize(ServiceContext& service,
                                         grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) {
  auto parsed = std::make_unique<ReceivedNormalizeRequest>();
  // The received bytes are gRPC's, held by gRPC until the call ends; the
  // parsed request takes its own references to them and empties the buffer.
  const absl::Status received =
      ParseReceivedNormalizeRequest(const_cast<grpc::ByteBuffer*>(request), parsed.get());
  auto* call = new TensorCall<ForwardTraits>(service, context, std::move(parsed),
                                             ForwardTraits::Response{response, {}});
  call->Start(received);
  return call;
}

grpc::ServerUnaryReactor* StartNormalizeBackward(ServiceContext& service,
                                                 grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  auto parsed = std::make_unique<ReceivedBackwardRequest>();
  // As for Normalize: the parsed request takes its own references to the
  // received bytes and empties the buffer.
  const absl::Status received =
      ParseReceivedBackwardRequest(const_cast<grpc::ByteBuffer*>(request), parsed.get());
  auto* call = new TensorCall<BackwardTraits>(service, context, std::move(parsed),
                                              BackwardTraits::Response{response, {}});
  call->Start(received);
  return call;
}

}  // namespace normsvc::server
