#include "server/kserve_stream.h"

#include <atomic>
#include <cstdint>

#include <grpcpp/server_context.h>

#include "absl/strings/str_cat.h"
#include "server/kserve_infer.h"
#include "server/raw_message.h"
#include "server/status_mapping.h"

namespace normsvc::server {

using StreamReactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// At most one stream operation is outstanding (a read, the run, or a
// write); `phase_` says which. The drain may come from another thread at
// any time: it finishes a stream whose read is outstanding, and otherwise
// leaves the finish to the stream's next step. gRPC operations are issued
// after mutex_ is released; moving to kDone under it makes Finish happen
// exactly once.
class KserveStreamCall final : public StreamReactor, public KserveInference, public DrainableCall {
 public:
  KserveStreamCall(ServiceContext& service, KserveStatistics& statistics, CallRegistry& registry)
      : KserveInference(service, statistics, Method::kModelStreamInfer), registry_(registry) {}

  void Begin() {
    started_.store(true, std::memory_order_release);  // see started_
    IssueRead();
    registry_.Add(this);  // may drain at once
  }

  void OnServerDrain() override {
    {
      absl::MutexLock lock(&mutex_);
      draining_ = true;
      if (phase_ != Phase::kReading) return;
      phase_ = Phase::kDone;
    }
    Finish(ToGrpcStatus(ShuttingDown()));
  }

  void OnReadDone(bool ok) override {
    started_.load(std::memory_order_acquire);
    {
      absl::MutexLock lock(&mutex_);
      if (phase_ == Phase::kDone) return;  // drained while reading
      phase_ = ok ? Phase::kRunning : Phase::kDone;
    }
    if (!ok) return Finish(grpc::Status::OK);  // half-closed (or cancelled)
    reply_.Clear();
    ++messages_read_;
    // On failure request_ is left empty: what parsed before the fault, echoed
    // in the reply, could make the reply fail to parse at the client too.
    absl::Status received = ParseMessageBytes(&received_, &request_);
    if (!received.ok()) {
      received = absl::InvalidArgumentError(
          absl::StrCat("stream message ", messages_read_, " is not a valid ModelInferRequest"));
    }
    RunInference(&request_, reply_.mutable_infer_response(), absl::InfiniteFuture(), received);
  }

  void OnWriteDone(bool ok) override {
    started_.load(std::memory_order_acquire);
    bool drain = false;
    {
      absl::MutexLock lock(&mutex_);
      // Under the lock, which orders it after the batch thread's
      // HoldUntilReplied (OnInferenceDone takes it too), where
      // ThreadSanitizer can see the order gRPC's write completion keeps.
      ReleaseReplyMemory();
      drain = draining_;
      if (!ok || drain) phase_ = Phase::kDone;
    }
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    if (drain) return Finish(ToGrpcStatus(ShuttingDown()));
    IssueRead();
  }

  void OnCancel() override {
    started_.load(std::memory_order_acquire);
    MarkCancelled();
  }
  void OnDone() override {
    started_.load(std::memory_order_acquire);
    registry_.Remove(this);
    delete this;
  }

 private:
  enum class Phase { kIssuingRead, kReading, kRunning, kWriting, kDone };

  // Starts a read; a drain that came while it was being issued finishes
  // the stream right after.
  void IssueRead() {
    uint64_t generation = 0;
    {
      absl::MutexLock lock(&mutex_);
      generation = ++read_generation_;
      phase_ = Phase::kIssuingRead;
    }
    StartRead(&received_);
    bool finish_now = false;
    {
      absl::MutexLock lock(&mutex_);
      if (phase_ != Phase::kIssuingRead || read_generation_ != generation) return;
      finish_now = draining_;
      phase_ = finish_now ? Phase::kDone : Phase::kReading;
    }
    if (finish_now) Finish(ToGrpcStatus(ShuttingDown()));
  }

  void OnInferenceDone(const absl::Status& status) override {
    const bool refused = refused_for_drain();
    {
      absl::MutexLock lock(&mutex_);
      phase_ = refused ? Phase::kDone : Phase::kWriting;
    }
    if (refused) return Finish(ToGrpcStatus(status));
    if (!status.ok()) {
      reply_.set_error_message(absl::StrCat(StatusCodeName(status.code()), ": ", status.message()));
      reply_.mutable_infer_response()->set_model_name(request_.model_name());
      reply_.mutable_infer_response()->set_id(request_.id());
    }
    if (!SerializeMessageBytes(reply_, &reply_bytes_)) {
      reply_.Clear();
      reply_.set_error_message("INTERNAL: the reply could not be serialized");
      SerializeMessageBytes(reply_, &reply_bytes_);
    }
    StartWrite(&reply_bytes_);
  }

  CallRegistry& registry_;
  // The handler thread releases this object (its mutex included) to gRPC's
  // threads, which acquire it in each reaction. gRPC orders the two in its
  // core already; this states the order in C++ terms, where ThreadSanitizer
  // sees it (without it, the first lock of mutex_ on a gRPC thread was
  // reported against the allocation).
  std::atomic<bool> started_{false};
  grpc::ByteBuffer received_;  // the message as read; parsed into request_
  inference::ModelInferRequest request_;
  inference::ModelStreamInferResponse reply_;
  grpc::ByteBuffer reply_bytes_;  // reply_, serialized, as written
  int64_t messages_read_ = 0;     // on the stream's one operation at a time
  absl::Mutex mutex_;
  Phase phase_ ABSL_GUARDED_BY(mutex_) = Phase::kIssuingRead;
  uint64_t read_generation_ ABSL_GUARDED_BY(mutex_) = 0;
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
};

StreamReactor* StartKserveModelStreamInfer(ServiceContext& service, KserveStatistics& statistics,
                                           CallRegistry& registry,
                                           grpc::CallbackServerContext* /*context*/) {
  auto* call = new KserveStreamCall(service, statistics, registry);
  call->Begin();
  return call;
}

}  // namespace normsvc::server
