// Unary Normalize calls over the gRPC callback API: a closed loop that
// measures the server's capacity, and an open loop (Poisson arrivals at a
// set rate) that mixes valid requests with cancelled ones, deadlines that
// expire in the queue, and malformed and oversized requests. Every call's
// final status goes to the Tally exactly once; OK responses are verified.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <thread>
#include <vector>

#include "normsvc/v1/normalizer.grpc.pb.h"
#include "soak_tally.h"
#include "soak_workload.h"

namespace normsvc::soak {

using Clock = std::chrono::steady_clock;

// Shares of the open loop's arrivals; the rest are valid requests.
struct ArrivalMix {
  double cancelled = 0.08;
  double short_deadline = 0.08;
  double malformed = 0.07;
  double oversized = 0.03;
  // Cancellation delay and short deadlines, drawn uniformly in [0, max].
  std::chrono::microseconds max_cancel_delay{20000};
  std::chrono::microseconds max_short_deadline{50000};
};

class UnaryLoad {
 public:
  UnaryLoad(const Workload& workload, std::vector<v1::Normalizer::Stub*> stubs, Tally* tally,
            uint64_t seed);
  ~UnaryLoad();  // stops the cancellation thread; call WaitAll first

  // Closed loop of valid requests, `concurrency` in flight, for `duration`;
  // returns OK responses per second.
  double MeasureCapacity(int concurrency, std::chrono::milliseconds duration);
  // Closed loop of the largest valid requests with `max_open_bytes` of them
  // in flight, for `duration`: the most request bytes the open loop below
  // ever has open.
  void HoldLargest(int64_t max_open_bytes, std::chrono::milliseconds duration);
  // Open loop at `rate` requests per second until `until` or `*stop`. Never more than
  // `max_open_calls` calls or `max_open_bytes` request bytes open: then
  // arrivals wait, count as late, and are dropped once 50 ms behind.
  void RunOpenLoop(double rate, Clock::time_point until, const std::atomic<bool>* stop,
                   const ArrivalMix& mix, int64_t max_open_calls, int64_t max_open_bytes);
  // The stubs later calls go out on. Only while no call is open (after
  // WaitAll); an empty list until the next call is allowed.
  void ReplaceStubs(std::vector<v1::Normalizer::Stub*> stubs);
  // Waits until every call has its final status and its Call (context and
  // all) is destroyed, at most `timeout`; returns how many are still open
  // (lost).
  int64_t WaitAll(std::chrono::milliseconds timeout);

  uint64_t late_arrivals() const { return late_arrivals_.load(); }
  // Arrivals sent per second over every open loop so far.
  double achieved_rate() const {
    return open_loop_seconds_ > 0 ? open_loop_sent_ / open_loop_seconds_ : 0;
  }

 private:
  struct OpenCall;
  struct Call;
  void Start(Category category, int index, std::chrono::microseconds deadline,
             std::chrono::microseconds cancel_after);
  void ClosedLoop(int concurrency, std::chrono::milliseconds duration, std::vector<int> indices);
  void OnDone(Call& call, const grpc::Status& status);
  void CallEnded(int64_t bytes);  // from OpenCall's destructor
  void CancelLoop();

  const Workload& workload_;
  std::vector<v1::Normalizer::Stub*> stubs_;
  Tally* tally_;
  std::mt19937_64 rng_;  // sender thread only
  std::atomic<uint64_t> next_stub_{0};
  std::atomic<int64_t> open_calls_{0};
  std::atomic<int64_t> open_bytes_{0};
  std::vector<int> closed_loop_indices_;  // valid requests the closed loop draws from
  std::atomic<bool> closed_loop_{false};
  Clock::time_point closed_loop_until_;
  std::atomic<uint64_t> closed_loop_ok_{0};
  std::atomic<uint64_t> late_arrivals_{0};
  uint64_t open_loop_sent_ = 0;
  double open_loop_seconds_ = 0;

  std::mutex mutex_;
  std::condition_variable idle_cv_;
  // Cancellations due, earliest first.
  using Due = std::pair<Clock::time_point, std::shared_ptr<Call>>;
  struct Later {
    bool operator()(const Due& a, const Due& b) const { return a.first > b.first; }
  };
  std::priority_queue<Due, std::vector<Due>, Later> cancellations_;
  std::condition_variable cancel_cv_;
  bool stopping_ = false;
  std::thread canceller_;
};

// Sends the workload's huge requests one at a time (alternating), one every
// `period`, until `until`; blocking calls on the calling thread.
void SendHugeRequests(const Workload& workload, v1::Normalizer::Stub* stub, Tally* tally,
                      Clock::time_point until, std::chrono::milliseconds period);

}  // namespace normsvc::soak
