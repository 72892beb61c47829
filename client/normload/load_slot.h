// The engine's per-request state and its NormalizeStream connection
// (engine.h describes the engine).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include "engine.h"
#include "normsvc/v1/normalizer.grpc.pb.h"

namespace normsvc::normload {

using Clock = std::chrono::steady_clock;
inline constexpr int kCodeCount = 17;

// Counters of one phase, updated from gRPC threads.
struct PhaseCounters {
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> errors{0};
  std::array<std::atomic<uint64_t>, kCodeCount> errors_by_code{};
  std::array<std::atomic<uint64_t>, kMethodCount> method_ok{};
  std::array<std::atomic<uint64_t>, kMethodCount> method_errors{};
  std::atomic<uint64_t> rows{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> verified{0};
  std::atomic<uint64_t> verify_failures{0};
  LatencyHistogram latency;

  PhaseResult Take() {
    PhaseResult result;
    result.ok = ok.load();
    result.errors = errors.load();
    for (int i = 0; i < kCodeCount; ++i) result.errors_by_code[i] = errors_by_code[i].load();
    for (int i = 0; i < kMethodCount; ++i) {
      result.method_ok[i] = method_ok[i].load();
      result.method_errors[i] = method_errors[i].load();
    }
    result.rows = rows.load();
    result.bytes_sent = bytes_sent.load();
    result.bytes_received = bytes_received.load();
    result.verified = verified.load();
    result.verify_failures = verify_failures.load();
    result.latency = latency.Take(false);
    return result;
  }
};

class StreamConnection;

// One request in flight at a time. Owned by the engine; never moves.
struct Slot {
  int index = 0;
  int channel = 0;
  int sender = 0;  // open loop: the sender thread whose free list it returns to
  uint64_t rng = 0;
  int kind = 0;
  int variant = 0;
  Clock::time_point start;
  bool measured = false;
  std::optional<grpc::ClientContext> context;
  v1::NormalizeResponse forward_response;
  v1::NormalizeBackwardResponse backward_response;
  // Stream requests carry the slot's index as request_id, so each slot
  // keeps its own copy of the last request it streamed.
  v1::NormalizeRequest stream_request;
  int cached_kind = -1;
  int cached_variant = -1;
  // Set while waiting on a stream; read by OnStreamEnded of every stream.
  std::atomic<StreamConnection*> stream{nullptr};
  // Hands the slot to the thread that completes its request: Start releases
  // what it wrote (and what the previous completion wrote), the completion
  // acquires it. gRPC orders the two through its core already; this states
  // the order in C++ terms, where ThreadSanitizer sees it.
  std::atomic<uint64_t> handoff{0};
};

// Receives what a StreamConnection reads (on gRPC threads).
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual void OnStreamResponse(const v1::NormalizeStreamResponse& response) = 0;
  // The stream ended. `unsent`: its slots whose requests were never written
  // (the server never saw them; they may go out again on another stream);
  // the other slots still waiting on it will never be answered.
  virtual void OnStreamEnded(StreamConnection* stream, const grpc::Status& status,
                             const std::vector<Slot*>& unsent) = 0;
};

// One NormalizeStream call shared by many slots: requests are written one
// at a time in queue order; responses go to the sink as they arrive.
//
// Writes start on sender and completion threads, outside this stream's own
// reactions, so it holds the call open (AddHold) until it starts no more
// writes (half-close issued, a write failed, or the read side ended): gRPC
// frees a call once it ended and nothing holds it, and a write started after
// that would touch freed memory.
class StreamConnection
    : public grpc::ClientBidiReactor<v1::NormalizeRequest, v1::NormalizeStreamResponse> {
 public:
  StreamConnection(StreamSink* sink, v1::Normalizer::Stub* stub)
      : sink_(sink), opened_(Clock::now()) {
    stub->async()->NormalizeStream(&context_, this);
    AddHold();  // released by ReleaseHoldLocked
    StartRead(&response_);
    StartCall();
  }

  // Queues the slot's stream_request; false when the stream has ended.
  bool Send(Slot* slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!TakesRequestsLocked()) return false;
    slot->stream.store(this, std::memory_order_release);
    queue_.push_back(slot);
    if (!writing_) StartNextLocked();
    return true;
  }

  // Takes no more requests and half-closes once the queued ones are
  // written; the server answers what it read, then ends the call. Does not
  // wait (call it with no lock held: the call may end inside it).
  void Retire() {
    std::unique_lock<std::mutex> lock(mutex_);
    RetireLocked(lock);
  }

  // Retire, then waits for the end.
  void Close(std::chrono::milliseconds cancel_after) {
    std::unique_lock<std::mutex> lock(mutex_);
    RetireLocked(lock);
    // Waits for OnDone to be finished with this object, not only for done_
    // (set before it tells the sink): the caller destroys the stream next.
    if (!done_cv_.wait_for(lock, cancel_after, [this] { return ended_; })) {
      context_.TryCancel();
      done_cv_.wait(lock, [this] { return ended_; });
    }
  }
  void Cancel() { context_.TryCancel(); }
  // True once a response has come back on this stream.
  bool answered() const { return answered_.load(std::memory_order_relaxed); }
  Clock::time_point opened() const { return opened_; }
  // True while the stream takes requests (Send would queue one).
  bool open() {
    std::lock_guard<std::mutex> lock(mutex_);
    return TakesRequestsLocked();
  }

  void OnWriteDone(bool ok) override {
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.pop_front();
      writing_ = false;
      if (!ok) {
        broken_ = true;
      } else {
        StartNextLocked();
      }
      if (broken_ || writes_done_) release = ReleaseHoldLocked();  // no more writes
    }
    if (release) RemoveHold();
  }
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  // Nothing may be started once the stream has ended or a write failed.
  void StartNextLocked() {
    if (done_ || broken_) return;
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front()->stream_request);
    } else if (closing_ && !writes_done_) {
      writes_done_ = true;
      StartWritesDone();
    }
  }
  bool TakesRequestsLocked() const { return !done_ && !broken_ && !closing_; }
  void RetireLocked(std::unique_lock<std::mutex>& lock) {
    closing_ = true;
    if (writing_) return;  // OnWriteDone half-closes after the last write
    StartNextLocked();
    if ((writes_done_ || broken_) && ReleaseHoldLocked()) {
      lock.unlock();
      RemoveHold();
      lock.lock();
    }
  }
  // True once: the caller then calls RemoveHold() outside the mutex.
  bool ReleaseHoldLocked() {
    if (hold_released_) return false;
    hold_released_ = true;
    return true;
  }

  StreamSink* sink_;
  const Clock::time_point opened_;
  grpc::ClientContext context_;
  v1::NormalizeStreamResponse response_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::deque<Slot*> queue_;  // front is being written while writing_
  bool writing_ = false;
  bool closing_ = false;
  bool writes_done_ = false;
  bool broken_ = false;
  bool hold_released_ = false;
  bool done_ = false;
  bool ended_ = false;  // OnDone has returned from the sink: set with the notify
  std::atomic<bool> answered_{false};
};

// The engine's NormalizeStream calls, `per_channel` on each stub. A stream
// that has ended (the server closed it, e.g. at --max_connection_age_ms, or
// the connection broke) is replaced by a new call on the same channel when a
// request is sent to it, as long as the run allows it; after
// kMaxFailedReopens replacements in a row that answered nothing, that
// stream stays closed and its requests fail. With `rotate_after` > 0, an
// open stream that old is retired when a request is sent to it (it takes
// no more, half-closes and is answered to the end) and a new call takes the
// request: a server's maximum connection age then ends no stream with
// requests in flight, as long as its grace period is longer than that and
// requests keep coming (a stream is only retired by a send). Every stream
// is kept until CloseAll: a sender may still hold one it loaded.
class StreamPool {
 public:
  static constexpr int kMaxFailedReopens = 3;

  StreamPool(StreamSink* sink, const std::vector<v1::Normalizer::Stub*>& stubs, int per_channel,
             Clock::duration rotate_after);
  ~StreamPool();

  // Queues the slot on stream `index`, replacing an ended (or, when
  // rotating, old) stream first when `may_reopen`. False when no open
  // stream took it. Call with no stream's lock held.
  bool Send(int index, Slot* slot, bool may_reopen);
  void CancelAll();
  // Closes every stream ever opened (StreamConnection::Close).
  void CloseAll(std::chrono::milliseconds cancel_after);
  uint64_t reopened() const { return reopened_.load(); }
  uint64_t rotated() const { return rotated_.load(); }
  // Streams that ended and could not be replaced (run shortened for them).
  uint64_t lost() const { return lost_.load(); }

 private:
  // Replaces `old`, the current stream at `index`, by a new call and
  // retires it (unless another thread replaced it first).
  void Rotate(int index, StreamConnection* old);

  StreamSink* sink_;
  const Clock::duration rotate_after_;
  std::vector<v1::Normalizer::Stub*> stubs_;  // one per stream index
  std::vector<std::atomic<StreamConnection*>> current_;
  std::mutex mutex_;  // guards all_, failed_reopens_, given_up_
  std::vector<std::unique_ptr<StreamConnection>> all_;
  std::vector<int> failed_reopens_;
  std::vector<bool> given_up_;
  std::atomic<uint64_t> reopened_{0}, lost_{0}, rotated_{0};
};

}  // namespace normsvc::normload
