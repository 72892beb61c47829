#include "unary_load.h"

#include <algorithm>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"

namespace normsvc::soak {

// Counts a call as open from Start until its Call is destroyed: the
// member declared first, so destroyed last, after the ClientContext. Its
// context holds a reference to the channel, so a call ends only once that
// reference is gone: after WaitAll the caller's channels hold the last
// references, and destroying them (read_memory in soak_main.cc) never
// leaves a channel to be destroyed on a gRPC callback thread, where the
// completion's lambda drops the Call. A CI run once aborted with a heap
// corruption about 4 s after its load ended, where the channels are
// replaced, while the two cores were also compiling.
struct UnaryLoad::OpenCall {
  OpenCall() = default;
  OpenCall(const OpenCall&) = delete;
  OpenCall& operator=(const OpenCall&) = delete;
  UnaryLoad* load = nullptr;
  int64_t bytes = 0;
  ~OpenCall() {
    if (load != nullptr) load->CallEnded(bytes);
  }
};

// One call. Shared by gRPC's completion callback and, for cancelled
// requests, the cancellation queue (TryCancel on a finished call is a no-op
// as long as its context lives).
struct UnaryLoad::Call {
  OpenCall open;  // first: destroyed after the context
  Category category = kValid;
  int index = 0;
  int64_t bytes = 0;
  Clock::time_point start;
  grpc::ClientContext context;
  v1::NormalizeResponse response;
  std::atomic<int> finals{0};
  // Start releases the fields above to the completing thread, which
  // acquires them: gRPC orders the two already, in its core, where
  // ThreadSanitizer cannot see it.
  std::atomic<bool> started{false};
};

UnaryLoad::UnaryLoad(const Workload& workload, std::vector<v1::Normalizer::Stub*> stubs,
                     Tally* tally, uint64_t seed)
    : workload_(workload), stubs_(std::move(stubs)), tally_(tally), rng_(seed) {
  canceller_ = std::thread([this] { CancelLoop(); });
}

void UnaryLoad::ReplaceStubs(std::vector<v1::Normalizer::Stub*> stubs) {
  stubs_ = std::move(stubs);
}

UnaryLoad::~UnaryLoad() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cancel_cv_.notify_all();
  canceller_.join();
}

void UnaryLoad::Start(Category category, int index, std::chrono::microseconds deadline,
                      std::chrono::microseconds cancel_after) {
  auto call = std::make_shared<Call>();
  call->category = category;
  call->index = index;
  call->start = Clock::now();
  call->context.set_deadline(std::chrono::system_clock::now() + deadline);
  const v1::NormalizeRequest* request = nullptr;
  switch (category) {
    case kMalformed:
      request = &workload_.malformed[index].request;
      break;
    case kOversized:
      request = &workload_.oversized[index].request;
      break;
    default:
      request = &workload_.valid[index].request;
  }
  call->bytes = static_cast<int64_t>(request->ByteSizeLong());
  tally_->Sent(category);
  open_calls_.fetch_add(1);
  open_bytes_.fetch_add(call->bytes);
  call->open.load = this;  // counted open from here until the Call is destroyed
  call->open.bytes = call->bytes;
  v1::Normalizer::Stub* stub = stubs_[next_stub_.fetch_add(1) % stubs_.size()];
  if (category == kCancelled) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancellations_.emplace(call->start + cancel_after, call);
    }
    cancel_cv_.notify_one();
  }
  call->started.store(true, std::memory_order_release);
  stub->async()->Normalize(&call->context, request, &call->response,
                           [this, call](grpc::Status status) { OnDone(*call, status); });
}

void UnaryLoad::OnDone(Call& call, const grpc::Status& status) {
  call.started.load(std::memory_order_acquire);
  const std::string what = absl::StrCat(CategoryName(call.category), " request ", call.index);
  if (call.finals.fetch_add(1) != 0) {
    tally_->Duplicate(what);
    return;
  }
  grpc::StatusCode expected = grpc::StatusCode::OK;
  if (call.category == kMalformed) expected = workload_.malformed[call.index].expected;
  if (call.category == kOversized) expected = workload_.oversized[call.index].expected;
  tally_->Final(call.category, status.error_code(), expected,
                absl::StrCat(what, ": ", status.error_message()));
  const bool valid =
      call.category == kValid || call.category == kCancelled || call.category == kShortDeadline;
  if (status.ok() && valid) {
    const ValidRequest& expected_result = workload_.valid[call.index];
    std::string error =
        VerifyForward(expected_result, call.response, expected_result.request.request_id());
    if (!error.empty()) tally_->Wrong(error);
    tally_->OkLatency(std::chrono::duration<double, std::milli>(Clock::now() - call.start).count());
  }
  if (closed_loop_.load() && Clock::now() < closed_loop_until_) {
    if (status.ok()) closed_loop_ok_.fetch_add(1);
    thread_local std::mt19937_64 rng(std::random_device{}());
    const int pick = std::uniform_int_distribution<int>(0, closed_loop_indices_.size() - 1)(rng);
    Start(kValid, closed_loop_indices_[pick], std::chrono::seconds(30), {});
  }
}

void UnaryLoad::CallEnded(int64_t bytes) {
  open_bytes_.fetch_sub(bytes);
  // Under the mutex, so that WaitAll returns only after this thread is done
  // with the object (the load may be destroyed next).
  std::lock_guard<std::mutex> lock(mutex_);
  if (open_calls_.fetch_sub(1) == 1) idle_cv_.notify_all();
}

void UnaryLoad::ClosedLoop(int concurrency, std::chrono::milliseconds duration,
                           std::vector<int> indices) {
  closed_loop_ok_ = 0;
  closed_loop_indices_ = std::move(indices);
  closed_loop_until_ = Clock::now() + duration;
  closed_loop_ = true;  // publishes the two fields above to the completions
  std::uniform_int_distribution<int> pick(0, closed_loop_indices_.size() - 1);
  for (int i = 0; i < concurrency; ++i) {
    Start(kValid, closed_loop_indices_[pick(rng_)], std::chrono::seconds(30), {});
  }
  std::this_thread::sleep_until(closed_loop_until_);
}

double UnaryLoad::MeasureCapacity(int concurrency, std::chrono::milliseconds duration) {
  std::vector<int> all(workload_.valid.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  const Clock::time_point start = Clock::now();
  ClosedLoop(concurrency, duration, std::move(all));
  const uint64_t ok = closed_loop_ok_.load();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  WaitAll(std::chrono::seconds(60));
  closed_loop_ = false;
  return ok / seconds;
}

void UnaryLoad::HoldLargest(int64_t max_open_bytes, std::chrono::milliseconds duration) {
  std::vector<int> by_size(workload_.valid.size());
  for (size_t i = 0; i < by_size.size(); ++i) by_size[i] = static_cast<int>(i);
  std::sort(by_size.begin(), by_size.end(),
            [&](int a, int b) { return workload_.valid[a].bytes > workload_.valid[b].bytes; });
  by_size.resize(std::min<size_t>(by_size.size(), 4));
  int64_t largest = 0;
  for (int index : by_size) largest = std::max(largest, workload_.valid[index].bytes);
  const int concurrency = std::max<int64_t>(1, max_open_bytes / largest);
  ClosedLoop(concurrency, duration, std::move(by_size));
  WaitAll(std::chrono::seconds(60));
  closed_loop_ = false;
}

void UnaryLoad::RunOpenLoop(double rate, Clock::time_point until, const std::atomic<bool>* stop,
                            const ArrivalMix& mix, int64_t max_open_calls, int64_t max_open_bytes) {
  std::exponential_distribution<double> gap(rate);
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int> valid(0, workload_.valid.size() - 1);
  // Cancelled and short-deadline requests are small ones: the client stops
  // counting them at once while the server may still hold them, so large
  // ones would put memory in flight beyond the limits above.
  std::vector<int> small;
  for (size_t i = 0; i < workload_.valid.size(); ++i) {
    if (workload_.valid[i].bytes <= 64 * 1024) small.push_back(static_cast<int>(i));
  }
  if (small.empty()) small.push_back(0);
  std::uniform_int_distribution<size_t> small_index(0, small.size() - 1);
  std::uniform_int_distribution<int> malformed(0, workload_.malformed.size() - 1);
  std::uniform_int_distribution<int> oversized(0, workload_.oversized.size() - 1);
  const auto draw = [&](std::chrono::microseconds max) {
    return std::chrono::microseconds(static_cast<int64_t>(unit(rng_) * max.count()));
  };
  const Clock::time_point start = Clock::now();
  Clock::time_point next = start;
  uint64_t sent = 0;
  while (next < until && !stop->load(std::memory_order_relaxed)) {
    const Clock::time_point now = Clock::now();
    if (next > now) std::this_thread::sleep_until(next);
    // Behind by more than 50 ms (the client itself cannot keep up): skip
    // ahead instead of sending a burst.
    if (now - next > std::chrono::milliseconds(50)) {
      late_arrivals_.fetch_add(1);
      next = now;
    }
    if (open_calls_.load() >= max_open_calls || open_bytes_.load() >= max_open_bytes) {
      late_arrivals_.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    const double u = unit(rng_);
    double edge = mix.cancelled;
    if (u < edge) {
      Start(kCancelled, small[small_index(rng_)], std::chrono::seconds(30),
            draw(mix.max_cancel_delay));
    } else if (u < (edge += mix.short_deadline)) {
      Start(kShortDeadline, small[small_index(rng_)],
            draw(mix.max_short_deadline) + std::chrono::microseconds(1), {});
    } else if (u < (edge += mix.malformed)) {
      Start(kMalformed, malformed(rng_), std::chrono::seconds(30), {});
    } else if (u < (edge += mix.oversized)) {
      Start(kOversized, oversized(rng_), std::chrono::seconds(30), {});
    } else {
      Start(kValid, valid(rng_), std::chrono::seconds(30), {});
    }
    ++sent;
    next += std::chrono::nanoseconds(static_cast<int64_t>(gap(rng_) * 1e9));
  }
  open_loop_sent_ += sent;
  open_loop_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t UnaryLoad::WaitAll(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait_for(lock, timeout, [this] { return open_calls_.load() == 0; });
  return open_calls_.load();
}

void UnaryLoad::CancelLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (cancellations_.empty()) {
      cancel_cv_.wait(lock);
      continue;
    }
    const Clock::time_point due = cancellations_.top().first;
    if (Clock::now() < due) {
      cancel_cv_.wait_until(lock, due);
      continue;
    }
    std::shared_ptr<Call> call = cancellations_.top().second;
    cancellations_.pop();
    lock.unlock();
    call->context.TryCancel();
    call.reset();
    lock.lock();
  }
}

void SendHugeRequests(const Workload& workload, v1::Normalizer::Stub* stub, Tally* tally,
                      Clock::time_point until, std::chrono::milliseconds period) {
  for (size_t i = 0; Clock::now() + period < until; ++i) {
    std::this_thread::sleep_for(period);
    const InvalidRequest& huge = workload.huge[i % workload.huge.size()];
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::NormalizeResponse response;
    tally->Sent(kHuge);
    const grpc::Status status = stub->Normalize(&context, huge.request, &response);
    tally->Final(kHuge, status.error_code(), huge.expected,
                 absl::StrCat(huge.description, ": ", status.error_message()));
  }
}

}  // namespace normsvc::soak
