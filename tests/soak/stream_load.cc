#include "stream_load.h"

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "normsvc/client/client.h"

namespace normsvc::soak {
namespace {

using Clock = std::chrono::steady_clock;

// The requests written on one stream, by request_id.
struct StreamLedger {
  struct Entry {
    Category category;
    int index;
    bool answered = false;
  };
  std::mutex mutex;
  std::condition_variable answered_cv;
  std::unordered_map<uint64_t, Entry> entries;
  int unanswered = 0;
};

void OnStreamResponse(const Workload& workload, Tally* tally, StreamLedger& ledger,
                      const v1::NormalizeStreamResponse& reply) {
  std::lock_guard<std::mutex> lock(ledger.mutex);
  auto it = ledger.entries.find(reply.request_id());
  if (it == ledger.entries.end()) {
    tally->Failure(
        absl::StrCat("stream reply for request_id ", reply.request_id(), ", which was never sent"));
    return;
  }
  StreamLedger::Entry& entry = it->second;
  const std::string what =
      absl::StrCat(CategoryName(entry.category), " stream request ", entry.index);
  if (entry.answered) {
    tally->Duplicate(what);
    return;
  }
  entry.answered = true;
  --ledger.unanswered;
  ledger.answered_cv.notify_all();
  const grpc::StatusCode code = reply.has_error()
                                    ? static_cast<grpc::StatusCode>(reply.error().code())
                                    : grpc::StatusCode::OK;
  const grpc::StatusCode expected = entry.category == kStreamMalformed
                                        ? workload.malformed[entry.index].expected
                                        : grpc::StatusCode::OK;
  tally->Final(entry.category, code, expected,
               absl::StrCat(what, ": ", reply.has_error() ? reply.error().message() : ""));
  if (code == grpc::StatusCode::OK && entry.category == kStreamValid) {
    if (!reply.has_response()) {
      tally->Wrong(absl::StrCat(what, ": neither a response nor an error"));
      return;
    }
    std::string error =
        VerifyForward(workload.valid[entry.index], reply.response(), reply.request_id());
    if (!error.empty()) tally->Wrong(absl::StrCat("stream: ", error));
  }
}

void RunOneStream(const Workload& workload, v1::Normalizer::Stub* stub, Tally* tally,
                  const StreamClientOptions& options, std::mt19937_64& rng,
                  Clock::time_point until) {
  const int count =
      std::uniform_int_distribution<int>(options.min_requests, options.max_requests)(rng);
  const bool disconnect = std::bernoulli_distribution(options.disconnect_share)(rng);
  const int written = disconnect ? std::uniform_int_distribution<int>(1, count)(rng) : count;
  std::uniform_int_distribution<int> valid(0, workload.valid.size() - 1);
  std::uniform_int_distribution<int> malformed(0, workload.malformed.size() - 1);
  std::bernoulli_distribution is_malformed(options.malformed_share);

  StreamLedger ledger;  // outlives the stream (declared first, destroyed last)
  client::CallOptions call_options;
  call_options.timeout = absl::Seconds(120);
  client::NormalizeStream stream(stub, call_options, [&](const v1::NormalizeStreamResponse& reply) {
    OnStreamResponse(workload, tally, ledger, reply);
  });
  for (int i = 0; i < written; ++i) {
    {
      std::unique_lock<std::mutex> lock(ledger.mutex);
      if (!ledger.answered_cv.wait_for(lock, std::chrono::seconds(60),
                                       [&] { return ledger.unanswered < options.max_in_flight; })) {
        tally->Failure("a stream got no reply for 60 s");
        break;
      }
    }
    const bool bad = is_malformed(rng);
    const Category category = bad ? kStreamMalformed : kStreamValid;
    const int index = bad ? malformed(rng) : valid(rng);
    v1::NormalizeRequest request =
        bad ? workload.malformed[index].request : workload.valid[index].request;
    const uint64_t id = i + 1;
    request.set_request_id(id);
    {
      std::lock_guard<std::mutex> lock(ledger.mutex);
      ledger.entries.emplace(id, StreamLedger::Entry{category, index});
      ++ledger.unanswered;
    }
    tally->Sent(category);
    stream.Write(std::move(request));
    if (Clock::now() > until + std::chrono::seconds(10)) break;  // bounded past the end
  }
  if (disconnect) {
    // Leave with requests in flight: a cancel resets the HTTP/2 stream, as a
    // client that goes away does.
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng)));
    stream.Cancel();
  }
  const absl::Status status = stream.Finish();
  const absl::StatusCode want = disconnect ? absl::StatusCode::kCancelled : absl::StatusCode::kOk;
  if (status.code() != want) {
    tally->Failure(absl::StrCat(disconnect ? "disconnected" : "completed", " stream ended with ",
                                status.ToString()));
  }
  std::lock_guard<std::mutex> lock(ledger.mutex);
  if (disconnect) {
    tally->Abandoned(ledger.unanswered);
  } else {
    tally->Lost(ledger.unanswered, "requests of a completed stream");
  }
  tally->StreamEnded(disconnect);
}

}  // namespace

void RunStreamClient(const Workload& workload, v1::Normalizer::Stub* stub, Tally* tally,
                     const StreamClientOptions& options, uint64_t seed, Clock::time_point until,
                     const std::atomic<bool>* stop) {
  std::mt19937_64 rng(seed);
  while (Clock::now() < until && !stop->load()) {
    RunOneStream(workload, stub, tally, options, rng, until);
  }
}

}  // namespace normsvc::soak
