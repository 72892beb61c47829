#include "engine.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "load_slot.h"
#include "normsvc/v1/normalizer.grpc.pb.h"
#include "verify.h"

namespace normsvc::normload {
namespace {

uint64_t NextRandom(uint64_t& state) {  // xorshift64*
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1DULL;
}

struct SenderState {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Slot*> free;
};

class Engine : public StreamSink {
 public:
  Engine(const EngineOptions& options, const std::vector<PreparedKind>& kinds,
         const std::vector<std::shared_ptr<grpc::Channel>>& channels);
  RunResult Run();

  void OnUnaryDone(Slot* slot, const grpc::Status& status);
  void OnStreamResponse(const v1::NormalizeStreamResponse& response) override;
  void OnStreamEnded(StreamConnection* stream, const grpc::Status& status,
                     const std::vector<Slot*>& unsent) override;

 private:
  void Issue(Slot* slot);  // closed loop: next request of a slot, or retire it
  void Start(Slot* slot);  // picks a kind and sends; slot->start is set
  // Queues the slot's stream_request on its stream; fails it when no
  // stream takes it.
  void SendOnStream(Slot* slot);
  void Complete(Slot* slot, int method, grpc::StatusCode code, const std::string& message,
                uint64_t bytes_received, const std::string& verify_error);
  // A slot's request is answered (or failed): counts it out of in_flight_
  // and hands the slot on (AfterCompletion), in the order Run()'s end needs.
  void Answered(Slot* slot);
  void AfterCompletion(Slot* slot);
  void SenderLoop(int sender);
  void ServiceDeferred();
  void PrintProgress(double elapsed_s);
  bool Drained() const;

  EngineOptions options_;
  const std::vector<PreparedKind>& kinds_;
  std::vector<std::unique_ptr<v1::Normalizer::Stub>> stubs_;
  std::unique_ptr<StreamPool> streams_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int> kind_table_;  // 4096 entries, kinds by weight
  std::vector<std::unique_ptr<SenderState>> senders_;
  Clock::time_point begin_, measure_start_, end_;

  PhaseCounters warmup_, measured_;
  std::atomic<uint64_t> interval_ok_{0}, interval_errors_{0};
  LatencyHistogram interval_latency_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> retired_{0};
  std::atomic<int64_t> max_lag_ns_{0};
  std::atomic<uint64_t> late_sends_{0};
  std::atomic<uint64_t> not_sent_{0};
  std::atomic<int64_t> last_measured_done_ns_{0};  // since begin_
  std::mutex note_mutex_;
  std::string first_verify_failure_, first_error_;
  std::mutex deferred_mutex_;
  std::vector<Slot*> deferred_;
};

thread_local int issue_depth = 0;

Engine::Engine(const EngineOptions& options, const std::vector<PreparedKind>& kinds,
               const std::vector<std::shared_ptr<grpc::Channel>>& channels)
    : options_(options), kinds_(kinds) {
  for (const auto& channel : channels) stubs_.push_back(v1::Normalizer::NewStub(channel));
  double total_weight = 0;
  for (const PreparedKind& kind : kinds_) total_weight += kind.kind.weight;
  double cumulative = 0;
  size_t next = 0;
  for (size_t k = 0; k < kinds_.size(); ++k) {
    cumulative += kinds_[k].kind.weight;
    const size_t until =
        k + 1 == kinds_.size() ? 4096 : static_cast<size_t>(4096 * cumulative / total_weight);
    for (; next < until; ++next) kind_table_.push_back(static_cast<int>(k));
  }
  const int slot_count =
      options_.mode == LoopMode::kClosed ? options_.concurrency : options_.max_in_flight;
  const int senders = options_.mode == LoopMode::kOpen ? std::max(1, options_.sender_threads) : 0;
  for (int s = 0; s < senders; ++s) senders_.push_back(std::make_unique<SenderState>());
  for (int i = 0; i < slot_count; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->index = i;
    slot->channel = i % static_cast<int>(stubs_.size());
    slot->rng = options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(i) * 7919 + 1;
    if (senders > 0) {
      slot->sender = i % senders;
      senders_[slot->sender]->free.push_back(slot.get());
    }
    slots_.push_back(std::move(slot));
  }
  bool any_stream = false;
  for (const PreparedKind& kind : kinds_) any_stream |= kind.kind.transport == Transport::kStream;
  if (any_stream) {
    std::vector<v1::Normalizer::Stub*> stubs;
    for (auto& stub : stubs_) stubs.push_back(stub.get());
    streams_ = std::make_unique<StreamPool>(this, stubs, std::max(1, options_.streams_per_channel),
                                            std::chrono::milliseconds(options_.stream_rotate_ms));
  }
}

void Engine::Issue(Slot* slot) {
  const Clock::time_point now = Clock::now();
  if (now >= end_) {
    retired_.fetch_add(1);
    return;
  }
  slot->start = now;
  Start(slot);
}

void Engine::Start(Slot* slot) {
  // The phase of the moment it is sent: an open loop running behind sends
  // warm-up arrivals late, inside the window, and they count there.
  slot->measured = Clock::now() >= measure_start_;
  slot->kind = kind_table_[NextRandom(slot->rng) % kind_table_.size()];
  const PreparedKind& kind = kinds_[slot->kind];
  slot->variant = static_cast<int>(NextRandom(slot->rng) % kind.variants.size());
  const Variant& variant = kind.variants[slot->variant];
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  if (kind.kind.transport == Transport::kStream) {
    if (slot->cached_kind != slot->kind || slot->cached_variant != slot->variant) {
      slot->stream_request = variant.forward;
      slot->cached_kind = slot->kind;
      slot->cached_variant = slot->variant;
    }
    slot->stream_request.set_request_id(static_cast<uint64_t>(slot->index));
    SendOnStream(slot);
    return;
  }
  slot->context.emplace();
  slot->context->set_deadline(std::chrono::system_clock::now() +
                              std::chrono::milliseconds(options_.deadline_ms));
  v1::Normalizer::Stub::async_interface* async = stubs_[slot->channel]->async();
  slot->handoff.fetch_add(1, std::memory_order_release);  // see Slot::handoff
  if (kind.kind.method == Method::kForward) {
    async->Normalize(&*slot->context, &variant.forward, &slot->forward_response,
                     [this, slot](grpc::Status status) { OnUnaryDone(slot, status); });
  } else {
    async->NormalizeBackward(&*slot->context, &variant.backward, &slot->backward_response,
                             [this, slot](grpc::Status status) { OnUnaryDone(slot, status); });
  }
}

void Engine::SendOnStream(Slot* slot) {
  const int per_channel = std::max(1, options_.streams_per_channel);
  const int stream =
      slot->channel * per_channel + slot->index / static_cast<int>(stubs_.size()) % per_channel;
  slot->handoff.fetch_add(1, std::memory_order_release);  // see Slot::handoff
  if (!streams_->Send(stream, slot, /*may_reopen=*/Clock::now() < end_)) {
    Complete(slot, kMethodNormalizeStream, grpc::StatusCode::UNAVAILABLE, "stream ended", 0, "");
    // A broken stream takes its slots out of the loop instead of spinning.
    if (options_.mode == LoopMode::kClosed) {
      in_flight_.fetch_sub(1);
      retired_.fetch_add(1);  // the last touch: Run() may end after it
    } else {
      Answered(slot);
    }
  }
}

void Engine::OnUnaryDone(Slot* slot, const grpc::Status& status) {
  slot->handoff.load(std::memory_order_acquire);  // see Slot::handoff
  const PreparedKind& kind = kinds_[slot->kind];
  const Variant& variant = kind.variants[slot->variant];
  std::string verify_error;
  uint64_t bytes = 0;
  int method = kMethodNormalize;
  if (kind.kind.method == Method::kForward) {
    const v1::NormalizeResponse& r = slot->forward_response;
    if (status.ok()) {
      bytes = r.output().data().size() + r.residual_sum().data().size() + r.mean().data().size() +
              r.rstd().data().size();
      if (options_.verify) verify_error = CheckForwardResponse(kind, variant, r, options_.echo);
    }
  } else {
    method = kMethodBackward;
    const v1::NormalizeBackwardResponse& r = slot->backward_response;
    if (status.ok()) {
      bytes =
          r.grad_input().data().size() + r.grad_gamma().data().size() + r.grad_beta().data().size();
      if (options_.verify) verify_error = CheckBackwardResponse(kind, variant, r);
    }
  }
  Complete(slot, method, status.error_code(), status.error_message(), bytes, verify_error);
  Answered(slot);
}

void Engine::OnStreamResponse(const v1::NormalizeStreamResponse& response) {
  if (response.request_id() >= slots_.size()) return;  // not ours: ignored
  Slot* slot = slots_[response.request_id()].get();
  slot->handoff.load(std::memory_order_acquire);  // see Slot::handoff
  slot->stream.store(nullptr, std::memory_order_relaxed);
  if (response.has_error()) {
    const int code = std::clamp(response.error().code(), 1, kCodeCount - 1);
    Complete(slot, kMethodNormalizeStream, static_cast<grpc::StatusCode>(code),
             response.error().message(), 0, "");
  } else {
    const PreparedKind& kind = kinds_[slot->kind];
    const v1::NormalizeResponse& r = response.response();
    const uint64_t bytes = r.output().data().size() + r.residual_sum().data().size() +
                           r.mean().data().size() + r.rstd().data().size();
    std::string verify_error;
    if (options_.verify) {
      verify_error = CheckForwardResponse(kind, kind.variants[slot->variant], r, options_.echo);
    }
    Complete(slot, kMethodNormalizeStream, grpc::StatusCode::OK, "", bytes, verify_error);
  }
  Answered(slot);
}

void Engine::OnStreamEnded(StreamConnection* stream, const grpc::Status& status,
                           const std::vector<Slot*>& unsent) {
  // Requests never written go out again on the stream's replacement (their
  // latency counts from the first send); after the run's end only on a
  // stream still open, and when no stream takes them, they fail as
  // SendOnStream says.
  for (Slot* slot : unsent) {
    slot->handoff.load(std::memory_order_acquire);  // see Slot::handoff
    slot->stream.store(nullptr, std::memory_order_relaxed);
    SendOnStream(slot);
  }
  // Requests still waiting on this stream will never be answered.
  for (auto& slot : slots_) {
    if (slot->stream.load(std::memory_order_acquire) != stream) continue;
    slot->stream.store(nullptr, std::memory_order_relaxed);
    const grpc::StatusCode code = status.ok() ? grpc::StatusCode::INTERNAL : status.error_code();
    Complete(slot.get(), kMethodNormalizeStream, code,
             status.ok() ? "stream ended before answering" : status.error_message(), 0, "");
    // The slot goes on: its next request reopens the stream (StreamPool).
    Answered(slot.get());
  }
}

void Engine::Complete(Slot* slot, int method, grpc::StatusCode code, const std::string& message,
                      uint64_t bytes_received, const std::string& verify_error) {
  PhaseCounters& phase = slot->measured ? measured_ : warmup_;
  const Clock::time_point now = Clock::now();
  // Only answered requests extend the window: one that failed at its
  // deadline, or a stream cancelled at the end, would stretch it by as much.
  if (slot->measured && code == grpc::StatusCode::OK) {
    const int64_t done = std::chrono::duration_cast<std::chrono::nanoseconds>(now - begin_).count();
    int64_t seen = last_measured_done_ns_.load(std::memory_order_relaxed);
    while (done > seen && !last_measured_done_ns_.compare_exchange_weak(seen, done)) {
    }
  }
  if (code == grpc::StatusCode::OK) {
    const uint64_t nanos =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - slot->start).count();
    const PreparedKind& kind = kinds_[slot->kind];
    phase.ok.fetch_add(1, std::memory_order_relaxed);
    phase.method_ok[method].fetch_add(1, std::memory_order_relaxed);
    phase.rows.fetch_add(kind.kind.rows, std::memory_order_relaxed);
    phase.bytes_sent.fetch_add(kind.variants[slot->variant].request_bytes,
                               std::memory_order_relaxed);
    phase.bytes_received.fetch_add(bytes_received, std::memory_order_relaxed);
    phase.latency.Record(nanos);
    interval_latency_.Record(nanos);
    interval_ok_.fetch_add(1, std::memory_order_relaxed);
    if (options_.verify) {
      if (verify_error.empty()) {
        phase.verified.fetch_add(1, std::memory_order_relaxed);
      } else {
        phase.verify_failures.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(note_mutex_);
        if (first_verify_failure_.empty()) {
          first_verify_failure_ =
              absl::StrCat(DescribeKind(kinds_[slot->kind].kind), ": ", verify_error);
        }
      }
    }
  } else {
    const int index = std::clamp(static_cast<int>(code), 0, kCodeCount - 1);
    phase.errors.fetch_add(1, std::memory_order_relaxed);
    phase.errors_by_code[index].fetch_add(1, std::memory_order_relaxed);
    phase.method_errors[method].fetch_add(1, std::memory_order_relaxed);
    interval_errors_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(note_mutex_);
    if (first_error_.empty()) {
      first_error_ = absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(index)),
                                  ": ", message);
    }
  }
}

void Engine::Answered(Slot* slot) {
  // The count that lets Run() end (in_flight_ in the open loop, retired_ in
  // the closed one, set inside Issue) is the last thing touched here: once
  // it moves, the engine may be destroyed. So the open loop hands the slot
  // back to its sender before it counts the request out.
  if (options_.mode == LoopMode::kOpen) {
    AfterCompletion(slot);
    in_flight_.fetch_sub(1, std::memory_order_release);
  } else {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    AfterCompletion(slot);
  }
}

void Engine::AfterCompletion(Slot* slot) {
  if (options_.mode == LoopMode::kOpen) {
    SenderState& sender = *senders_[slot->sender];
    std::lock_guard<std::mutex> lock(sender.mutex);
    sender.free.push_back(slot);
    sender.cv.notify_one();
    return;
  }
  // A call that fails at once may complete inline; bound the recursion by
  // handing deep re-issues to the main thread.
  if (issue_depth >= 4) {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    deferred_.push_back(slot);
    return;
  }
  ++issue_depth;
  Issue(slot);
  --issue_depth;
}

void Engine::ServiceDeferred() {
  std::vector<Slot*> ready;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    ready.swap(deferred_);
  }
  for (Slot* slot : ready) Issue(slot);
}

void Engine::SenderLoop(int index) {
  SenderState& sender = *senders_[index];
  std::mt19937_64 rng(options_.seed * 1000003 + index);
  std::exponential_distribution<double> gap(options_.rate / senders_.size());
  auto advance = [&](Clock::time_point& at) {
    at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
  };
  Clock::time_point next = begin_;
  while (true) {
    advance(next);
    if (next >= end_) break;
    Clock::time_point now = Clock::now();
    if (next - now > std::chrono::microseconds(150)) {
      std::this_thread::sleep_until(next - std::chrono::microseconds(80));
    }
    while (Clock::now() < next) std::this_thread::yield();
    Slot* slot = nullptr;
    {
      // With every slot in flight the send waits, but never past the window:
      // arrivals still unsent then are counted as not sent.
      std::unique_lock<std::mutex> lock(sender.mutex);
      if (sender.cv.wait_until(lock, end_, [&] { return !sender.free.empty(); })) {
        slot = sender.free.back();
        sender.free.pop_back();
      }
    }
    if (slot == nullptr || Clock::now() >= end_) {
      if (slot != nullptr) {
        std::lock_guard<std::mutex> lock(sender.mutex);
        sender.free.push_back(slot);
      }
      for (; next < end_; advance(next)) {
        not_sent_.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    }
    const int64_t lag =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - next).count();
    if (lag > 1000000) late_sends_.fetch_add(1, std::memory_order_relaxed);
    int64_t seen = max_lag_ns_.load(std::memory_order_relaxed);
    while (lag > seen && !max_lag_ns_.compare_exchange_weak(seen, lag)) {
    }
    slot->start = next;
    Start(slot);
  }
}

bool Engine::Drained() const {
  if (options_.mode == LoopMode::kClosed) return retired_.load() == static_cast<int>(slots_.size());
  return in_flight_.load(std::memory_order_acquire) == 0;  // see Answered
}

void Engine::PrintProgress(double elapsed_s) {
  const HistogramSnapshot latency = interval_latency_.Take(true);
  const uint64_t ok = interval_ok_.exchange(0);
  const uint64_t errors = interval_errors_.exchange(0);
  const double warmup = options_.warmup_s;
  const char* phase = elapsed_s <= warmup + 1e-3                         ? "warm-up"
                      : elapsed_s <= warmup + options_.duration_s + 1e-3 ? "measure"
                                                                         : "drain";
  std::fprintf(
      stderr, "[%6.1fs] %-7s %9llu req/s  p50 %8.3f ms  p99 %8.3f ms  errors %llu  in flight %d\n",
      elapsed_s, phase, static_cast<unsigned long long>(ok), latency.Percentile(0.5) / 1e6,
      latency.Percentile(0.99) / 1e6, static_cast<unsigned long long>(errors), in_flight_.load());
}

RunResult Engine::Run() {
  begin_ = Clock::now();
  measure_start_ = begin_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(options_.warmup_s));
  end_ = measure_start_ + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options_.duration_s));
  std::vector<std::thread> senders;
  if (options_.mode == LoopMode::kClosed) {
    for (auto& slot : slots_) Issue(slot.get());
  } else {
    for (size_t s = 0; s < senders_.size(); ++s)
      senders.emplace_back([this, s] { SenderLoop(static_cast<int>(s)); });
  }
  Clock::time_point next_progress = begin_ + std::chrono::seconds(1);
  auto tick = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ServiceDeferred();
    const Clock::time_point now = Clock::now();
    if (now >= next_progress) {
      if (options_.progress) PrintProgress(std::chrono::duration<double>(now - begin_).count());
      next_progress += std::chrono::seconds(1);
    }
  };
  while (Clock::now() < end_) tick();
  for (std::thread& sender : senders) sender.join();
  // Drain: unary calls end by their deadline; streams are cancelled after it.
  const Clock::time_point give_up =
      Clock::now() + std::chrono::milliseconds(options_.deadline_ms) + std::chrono::seconds(2);
  while (!Drained() && Clock::now() < give_up) tick();
  RunResult result;
  if (!Drained()) {
    result.abandoned = options_.mode == LoopMode::kClosed
                           ? slots_.size() - static_cast<size_t>(retired_.load())
                           : static_cast<size_t>(in_flight_.load());
    if (streams_) streams_->CancelAll();
    while (!Drained()) tick();
  }
  if (streams_) {
    streams_->CloseAll(std::chrono::milliseconds(2000));
    result.streams_reopened = streams_->reopened();
    result.streams_rotated = streams_->rotated();
    result.streams_lost = streams_->lost();
  }
  result.warmup = warmup_.Take();
  result.measured = measured_.Take();
  // Requests sent in the window are counted when they complete, so the
  // window's real length runs to the last of them that was answered.
  const double last_done_s = last_measured_done_ns_.load() / 1e9 - options_.warmup_s;
  result.measured_seconds = std::max(options_.duration_s, last_done_s);
  result.not_sent = not_sent_.load();
  result.max_send_lag_s = max_lag_ns_.load() / 1e9;
  result.late_sends = late_sends_.load();
  result.first_verify_failure = first_verify_failure_;
  result.first_error = first_error_;
  return result;
}

}  // namespace

const char* MethodName(int method) {
  switch (method) {
    case kMethodNormalize:
      return "Normalize";
    case kMethodNormalizeStream:
      return "NormalizeStream";
    default:
      return "NormalizeBackward";
  }
}

RunResult RunLoad(const EngineOptions& options, const std::vector<PreparedKind>& kinds,
                  const std::vector<std::shared_ptr<grpc::Channel>>& channels) {
  Engine engine(options, kinds, channels);
  return engine.Run();
}

}  // namespace normsvc::normload
