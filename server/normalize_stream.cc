#include "server/normalize_stream.h"

#include <atomic>
#include <deque>
#include <memory>
#include <optional>

#include <grpcpp/server_context.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "server/raw_message.h"
#include "server/received_request.h"
#include "server/status_mapping.h"
#include "server/task_builder.h"
#include "server/tensor_codec.h"
#include "server/wire_response.h"

namespace normsvc::server {

using StreamReactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// Locking: mutex_ guards the stream's state; gRPC operations (StartRead,
// StartWrite, Finish) are issued after it is released, from an Actions
// record decided under it. The flags set while deciding (read_pending_,
// writing_, finished_) keep two threads from issuing the same operation.
class NormalizeStreamCall final : public StreamReactor, public DrainableCall {
 public:
  NormalizeStreamCall(ServiceContext& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {}

  void Begin() {
    started_.store(true, std::memory_order_release);  // see started_
    Actions actions;
    {
      absl::MutexLock lock(&mutex_);
      DecideReadLocked(&actions);
    }
    Run(actions);
    service_.streams->Add(this);  // may drain at once
  }

  // Stop reading; finish once every accepted request is answered.
  void OnServerDrain() override {
    Actions actions;
    {
      absl::MutexLock lock(&mutex_);
      draining_ = true;
      DecideFinishLocked(&actions);
    }
    Run(actions);
  }

  void OnReadDone(bool ok) override {
    started_.load(std::memory_order_acquire);
    std::unique_ptr<Item> item;
    int64_t message_number = 0;
    Actions actions;
    {
      absl::MutexLock lock(&mutex_);
      std::unique_ptr<Item> read = std::move(reading_);
      if (ok && !finished_) {
        // read_pending_ stays set until the message is parsed: no other
        // reaction may start the next read before this one is known to be a
        // request (a malformed one stops the reading).
        item = std::move(read);
        ++outstanding_;
        message_number = ++messages_read_;
      } else {
        read_pending_ = false;
        if (!ok) half_closed_ = true;
        DecideFinishLocked(&actions);
      }
    }
    if (item != nullptr) {
      // As Normalize: the tensors' data stays in gRPC's buffers until the
      // executor copies it into its staging memory (received_request.h).
      const absl::Time parse_started = absl::Now();
      item->request = std::make_unique<ReceivedNormalizeRequest>();
      const bool parsed = ParseReceivedNormalizeRequest(&item->received, item->request.get()).ok();
      if (parsed) {
        Process(item.release());
      } else {
        item.reset();
        RecordMalformed(absl::Now() - parse_started);
      }
      absl::MutexLock lock(&mutex_);
      read_pending_ = false;
      if (!parsed) {
        --outstanding_;
        malformed_ = absl::InvalidArgumentError(absl::StrCat(
            "stream message ", message_number,
            " is not a valid NormalizeRequest; the requests before it were answered, and the "
            "stream reads no further"));
        DecideFinishLocked(&actions);
      }
      DecideReadLocked(&actions);
    }
    Run(actions);
  }

  void OnWriteDone(bool ok) override {
    started_.load(std::memory_order_acquire);
    DrainGate* const gate = service_.gate;
    Actions actions;
    int answered = 0;  // requests the drain gate admitted, now answered
    {
      absl::MutexLock lock(&mutex_);
      stream_bytes_ -= writing_->charged;
      answered += writing_->entered ? 1 : 0;
      writing_.reset();
      --outstanding_;
      if (!ok) {
        // The client is gone: nothing more can be written.
        write_failed_ = true;
        answered += DropUnwrittenLocked();
      }
      DecideWriteLocked(&actions);
      DecideReadLocked(&actions);
      DecideFinishLocked(&actions);
    }
    Run(actions);
    ExitGate(gate, answered);
  }

  void OnCancel() override {
    started_.load(std::memory_order_acquire);
    cancelled_.store(true, std::memory_order_relaxed);
    DrainGate* const gate = service_.gate;
    Actions actions;
    int answered = 0;
    {
      absl::MutexLock lock(&mutex_);
      answered = DropUnwrittenLocked();
      DecideFinishLocked(&actions);
    }
    Run(actions);
    ExitGate(gate, answered);
  }

  void OnDone() override {
    started_.load(std::memory_order_acquire);
    service_.streams->Remove(this);
    // The thread that decided Finish did so under the mutex: taking it
    // orders everything it wrote before this deletion.
    { absl::MutexLock lock(&mutex_); }
    delete this;
  }

 private:
  // One request of the stream and its reply; the task's sink.
  struct Item final : TaskSink {
    explicit Item(NormalizeStreamCall* owner) : stream(owner) {}
    bool IsCancelled() const override { return stream->cancelled_.load(std::memory_order_relaxed); }
    // Kept (down to the serialized reply's size, Complete) until the reply
    // is written or dropped: a client that reads its replies slowly holds
    // budget, and past the stream's share (stream_bytes_) its stream stops
    // reading, instead of the server's memory growing.
    void HoldUntilReplied(MemoryReservation held) override { reservation = std::move(held); }
    void OnTaskDone(const absl::Status& status) override { stream->Complete(this, status); }

    NormalizeStreamCall* const stream;
    grpc::ByteBuffer received;  // the message as read; taken over by `request`
    std::unique_ptr<ReceivedNormalizeRequest> request;  // dropped once its task is done
    // The result: `response` is its NormalizeResponse, encoded when the task
    // is built, into which the executor writes the result tensors
    // (wire_response.h); a success's reply wraps it (WrapStreamResponse), an
    // error's is `error_reply`, serialized.
    grpc::ByteBuffer response;
    v1::NormalizeStreamResponse error_reply;
    grpc::ByteBuffer reply_bytes;  // the reply as written
    absl::Time start;
    std::optional<kernels::NormOp> op;
    std::optional<kernels::DType> dtype;
    uint64_t request_id = 0;
    int64_t rows = 0;
    bool entered = false;
    MemoryReservation reservation;
    // What this item adds to stream_bytes_ (guarded by the stream's mutex):
    // its task's bytes while it runs, then its reply's until written.
    int64_t charged = 0;
  };

  // A message that did not parse: counted as a request refused at the edge,
  // its latency the time the parse took to reject it.
  void RecordMalformed(absl::Duration parse_time) {
    service_.metrics->RecordRequest(Method::kNormalizeStream, std::nullopt, std::nullopt,
                                    absl::StatusCode::kInvalidArgument, 0,
                                    absl::ToDoubleSeconds(parse_time));
  }

  struct Actions {
    grpc::ByteBuffer* read = nullptr;
    const grpc::ByteBuffer* write = nullptr;
    // More replies wait behind this one: gRPC may hold it in its buffer
    // until the next write (one that finds none waiting goes out at once),
    // so that several replies leave in one send.
    bool more_to_write = false;
    std::optional<grpc::Status> finish;
  };

  void Run(const Actions& actions) {
    if (actions.write != nullptr) {
      grpc::WriteOptions options;
      if (actions.more_to_write) options.set_buffer_hint();
      StartWrite(actions.write, options);
    }
    if (actions.read != nullptr) StartRead(actions.read);
    if (actions.finish) Finish(*actions.finish);
  }

  void DecideReadLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (read_pending_ || half_closed_ || draining_ || finished_ || write_failed_ ||
        !malformed_.ok() || cancelled_.load(std::memory_order_relaxed) ||
        outstanding_ >= service_.max_stream_in_flight ||
        stream_bytes_ >= service_.max_stream_bytes) {
      return;
    }
    read_pending_ = true;
    reading_ = std::make_unique<Item>(this);
    actions->read = &reading_->received;
  }

  // Replies that will never be written (the client is gone): their budget
  // goes back now. Returns how many of them the drain gate admitted.
  int DropUnwrittenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    int admitted = 0;
    outstanding_ -= static_cast<int64_t>(to_write_.size());
    for (const std::unique_ptr<Item>& item : to_write_) {
      stream_bytes_ -= item->charged;
      admitted += item->entered ? 1 : 0;
    }
    to_write_.clear();
    return admitted;
  }

  // A request the drain gate admitted leaves it once its reply is written,
  // or dropped because nobody can receive it (not when its task is done):
  // the server's drain then waits for replies still queued behind a slow
  // reader, and reports a drain cut short by its timeout as such. Called
  // with `gate` read while this call was certainly alive, outside the
  // mutex (Exit may wake the drain, which may then free the call).
  static void ExitGate(DrainGate* gate, int times) {
    for (int i = 0; i < times; ++i) gate->Exit();
  }

  void DecideWriteLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (writing_ != nullptr || to_write_.empty() || finished_) return;
    writing_ = std::move(to_write_.front());
    to_write_.pop_front();
    actions->write = &writing_->reply_bytes;
    actions->more_to_write = !to_write_.empty();
  }

  void DecideFinishLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (finished_ || outstanding_ != 0 || writing_ != nullptr) return;
    if (cancelled_.load(std::memory_order_relaxed)) {
      actions->finish = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    } else if (write_failed_) {
      actions->finish = grpc::Status(grpc::StatusCode::UNAVAILABLE, "could not write a reply");
    } else if (!malformed_.ok()) {
      actions->finish = ToGrpcStatus(malformed_);
    } else if (half_closed_) {
      actions->finish = grpc::Status::OK;
    } else if (draining_) {
      actions->finish = ToGrpcStatus(ShuttingDown());
    } else {
      return;
    }
    finished_ = true;
  }

  // Validates and schedules one request; answers at once when refused.
  void Process(Item* item) {
    item->start = absl::Now();
    const v1::NormalizeRequest& request = item->request->message;
    item->op = FromProtoOp(request.op());
    item->dtype = FromProtoDType(request.input().dtype());
    item->request_id = request.request_id();
    if (!service_.gate->TryEnter()) {
      {
        absl::MutexLock lock(&mutex_);
        draining_ = true;
      }
      return Complete(item, ShuttingDown());
    }
    item->entered = true;
    absl::StatusOr<ForwardPlan> plan =
        ValidateNormalize(request, item->request->tensor_data(), service_.limits, *service_.store);
    if (!plan.ok()) return Complete(item, plan.status());
    item->rows = plan->input.rows;
    WireResponse wire;  // used while the task is built (it sizes the tensors)
    wire.set_request_id(item->request_id);
    std::unique_ptr<Task> task =
        BuildForwardTask(*plan, request, wire, DeadlineOf(context_->deadline()), item);
    // Shares the tensors' memory, which the executor fills later.
    item->response = wire.TakeBuffer();
    if (item->rows == 0) {
      task.reset();  // before Complete, which may free the item it points to
      return Complete(item, absl::OkStatus());
    }
    // Charged to the stream before it can run (its completion may come
    // first): the next read decision sees it.
    item->charged = task->memory_bytes();
    {
      absl::MutexLock lock(&mutex_);
      stream_bytes_ += item->charged;
    }
    const absl::Status status = service_.pool->Schedule(task);
    if (!status.ok()) {
      task.reset();
      Complete(item, status);
    }
  }

  // The item's outcome: queue its reply. From any thread, once per item.
  void Complete(Item* raw, const absl::Status& status) {
    std::unique_ptr<Item> item(raw);
    absl::Status outcome = status;
    if (outcome.ok() && !WrapStreamResponse(item->request_id, item->response, &item->reply_bytes)) {
      outcome = absl::InternalError("the reply could not be encoded");
    }
    service_.metrics->RecordRequest(Method::kNormalizeStream, item->op, item->dtype, outcome.code(),
                                    item->rows, SecondsSince(item->start));
    // The task is gone (Batcher::Finish): the request's bytes can go now,
    // and the reply waits for its write as bytes only (and holds that much
    // of the budget).
    item->request.reset();
    if (!outcome.ok()) {
      item->error_reply.set_request_id(item->request_id);
      v1::NormalizeStreamResponse::Error* error = item->error_reply.mutable_error();
      error->set_code(static_cast<int>(outcome.code()));
      error->set_message(std::string(outcome.message()));
      if (!SerializeMessageBytes(item->error_reply, &item->reply_bytes)) {
        error->set_code(static_cast<int>(absl::StatusCode::kInternal));
        error->set_message("the reply could not be serialized");
        SerializeMessageBytes(item->error_reply, &item->reply_bytes);
      }
      item->error_reply = v1::NormalizeStreamResponse();
    }
    item->response.Clear();  // its slices live on in reply_bytes when sent
    // What stays in memory until the write: the serialized reply.
    item->reservation.ShrinkTo(static_cast<int64_t>(item->reply_bytes.Length()));
    DrainGate* const gate = service_.gate;
    int answered = 0;
    Actions actions;
    {
      absl::MutexLock lock(&mutex_);
      // From the task's bytes to its reply's (none when it is dropped).
      stream_bytes_ -= item->charged;
      item->charged = 0;
      if (cancelled_.load(std::memory_order_relaxed) || write_failed_ || finished_) {
        --outstanding_;  // nobody to write to
        answered = item->entered ? 1 : 0;
      } else {
        item->charged = item->reservation.bytes();
        stream_bytes_ += item->charged;
        to_write_.push_back(std::move(item));
        DecideWriteLocked(&actions);
      }
      DecideFinishLocked(&actions);
    }
    // This runs on a batch thread, outside gRPC's reactions: once the lock
    // is released, another item's Complete may finish the stream and gRPC
    // may delete this object. With a write to start the stream cannot finish
    // (writing_ is set), and the one that decided Finish owns the call until
    // it has issued it; with nothing to issue, `this` is not touched again.
    if (actions.write != nullptr || actions.finish) Run(actions);
    ExitGate(gate, answered);
  }

  ServiceContext& service_;
  grpc::CallbackServerContext* const context_;
  std::atomic<bool> cancelled_{false};
  // The handler thread releases this object (its mutex included) to gRPC's
  // threads, which acquire it in each reaction. gRPC orders the two in its
  // core already; this states the order in C++ terms, where ThreadSanitizer
  // sees it.
  std::atomic<bool> started_{false};

  absl::Mutex mutex_;
  std::unique_ptr<Item> reading_ ABSL_GUARDED_BY(mutex_);
  std::deque<std::unique_ptr<Item>> to_write_ ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<Item> writing_ ABSL_GUARDED_BY(mutex_);
  int64_t outstanding_ ABSL_GUARDED_BY(mutex_) = 0;  // read and not yet written or dropped
  // Budget bytes this stream holds: its tasks' (request and response) while
  // they run, then its replies' (serialized) until written or dropped. Past
  // max_stream_bytes it stops reading, so a client that reads slowly holds
  // up its own stream, not the server's whole budget.
  int64_t stream_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t messages_read_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status malformed_ ABSL_GUARDED_BY(mutex_);  // set by a message that did not parse
  bool read_pending_ ABSL_GUARDED_BY(mutex_) = false;
  bool half_closed_ ABSL_GUARDED_BY(mutex_) = false;
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mutex_) = false;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
};

StreamReactor* StartNormalizeStream(ServiceContext& service, grpc::CallbackServerContext* context) {
  auto* call = new NormalizeStreamCall(service, context);
  call->Begin();
  return call;
}

}  // namespace normsvc::server
