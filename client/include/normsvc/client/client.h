// Typed client of normsvc.v1.Normalizer: every RPC in a blocking form and a
// callback form, a bidirectional-stream wrapper, and the gRPC health check.
//
// Errors: calls return absl::Status with the gRPC code and the server's
// message unchanged (codes map one to one; absl::StatusCodeToString names
// them, e.g. "INVALID_ARGUMENT").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "normsvc/v1/normalizer.grpc.pb.h"

namespace normsvc::client {

struct CallOptions {
  // Deadline relative to the start of the call; absl::InfiniteDuration() for none.
  absl::Duration timeout = absl::Seconds(30);
  // Wait for the channel to connect instead of failing fast with UNAVAILABLE.
  bool wait_for_ready = false;
};

// Applies `options` to a fresh context (deadline, wait-for-ready).
void ConfigureContext(const CallOptions& options, grpc::ClientContext* context);
absl::Status ToAbslStatus(const grpc::Status& status);

// Result of grpc.health.v1.Health/Check.
enum class ServingStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
const char* ServingStatusName(ServingStatus status);

template <typename Response>
using Callback = std::function<void(absl::StatusOr<Response>)>;

class NormalizeStream;

class NormalizerClient {
 public:
  explicit NormalizerClient(std::shared_ptr<grpc::Channel> channel);

  // Blocking calls.
  absl::StatusOr<v1::NormalizeResponse> Normalize(const v1::NormalizeRequest& request,
                                                  const CallOptions& options = {});
  absl::StatusOr<v1::NormalizeBackwardResponse> NormalizeBackward(
      const v1::NormalizeBackwardRequest& request, const CallOptions& options = {});
  absl::StatusOr<v1::RegisterParametersResponse> RegisterParameters(
      const v1::RegisterParametersRequest& request, const CallOptions& options = {});
  absl::Status DeleteParameters(const std::string& name, const CallOptions& options = {});
  absl::StatusOr<v1::ListParametersResponse> ListParameters(const CallOptions& options = {});
  absl::StatusOr<v1::GetServerInfoResponse> GetServerInfo(const CallOptions& options = {});
  // grpc.health.v1.Health/Check for `service` ("" = the whole server).
  absl::StatusOr<ServingStatus> CheckHealth(const std::string& service = "",
                                            const CallOptions& options = {});
  // Sends every request over one NormalizeStream and returns the responses
  // in arrival order (per-request errors are entries with an `error`).
  absl::StatusOr<std::vector<v1::NormalizeStreamResponse>> NormalizeStreamAll(
      const std::vector<v1::NormalizeRequest>& requests, const CallOptions& options = {});

  // Callback forms: `done` runs once, on a gRPC thread, with the result.
  // The request is moved into the call; nothing is borrowed.
  void NormalizeAsync(v1::NormalizeRequest request, const CallOptions& options,
                      Callback<v1::NormalizeResponse> done);
  void NormalizeBackwardAsync(v1::NormalizeBackwardRequest request, const CallOptions& options,
                              Callback<v1::NormalizeBackwardResponse> done);
  void RegisterParametersAsync(v1::RegisterParametersRequest request, const CallOptions& options,
                               Callback<v1::RegisterParametersResponse> done);
  void DeleteParametersAsync(v1::DeleteParametersRequest request, const CallOptions& options,
                             Callback<v1::DeleteParametersResponse> done);
  void ListParametersAsync(const CallOptions& options, Callback<v1::ListParametersResponse> done);
  void GetServerInfoAsync(const CallOptions& options, Callback<v1::GetServerInfoResponse> done);

  // Opens a bidirectional stream; see NormalizeStream.
  std::unique_ptr<NormalizeStream> OpenStream(
      const CallOptions& options,
      std::function<void(const v1::NormalizeStreamResponse&)> on_response);

  // The generated stub, for callers that manage contexts and messages
  // themselves (the load generator reuses preallocated messages).
  v1::Normalizer::Stub* stub() { return stub_.get(); }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Normalizer::Stub> stub_;
};

// One NormalizeStream call. Write() queues requests (sent in order, one at a
// time, as gRPC requires); `on_response` runs on a gRPC thread for every
// response, in arrival order (completion order on the server, not request
// order: match by request_id). Thread-safe. The destructor cancels a stream
// that was not finished and waits for gRPC to release it.
//
// Writes start on the caller's thread, outside gRPC's reactions, so the
// stream holds the call open (AddHold) until it will start no more writes
// (half-close issued, a write failed, the read side ended, or destruction):
// gRPC frees a call once it ended and nothing holds it, and a write started
// after that would touch freed memory.
class NormalizeStream
    : public grpc::ClientBidiReactor<v1::NormalizeRequest, v1::NormalizeStreamResponse> {
 public:
  NormalizeStream(v1::Normalizer::Stub* stub, const CallOptions& options,
                  std::function<void(const v1::NormalizeStreamResponse&)> on_response);
  ~NormalizeStream() override;
  NormalizeStream(const NormalizeStream&) = delete;
  NormalizeStream& operator=(const NormalizeStream&) = delete;

  void Write(v1::NormalizeRequest request);
  // Half-closes once every queued request has been written.
  void WritesDone();
  // Half-closes (if not done yet) and waits for the server to end the
  // stream; returns the stream's final status.
  absl::Status Finish();
  void Cancel() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void StartNextWriteLocked();
  // True when the caller must RemoveHold() (outside the mutex): once only,
  // when no more writes will start.
  bool ReleaseHoldLocked();

  grpc::ClientContext context_;
  std::function<void(const v1::NormalizeStreamResponse&)> on_response_;
  v1::NormalizeStreamResponse response_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::deque<v1::NormalizeRequest> pending_;  // front is being written when writing_
  bool writing_ = false;
  bool writes_done_requested_ = false;
  bool writes_done_started_ = false;
  bool write_failed_ = false;
  bool hold_released_ = false;
  bool done_ = false;
  grpc::Status final_status_;
  // The constructing thread releases this object (its mutex included) to
  // gRPC's threads, which acquire it in each reaction. gRPC orders the two in
  // its core already; this states the order in C++ terms, where
  // ThreadSanitizer sees it.
  std::atomic<bool> started_{false};
};

}  // namespace normsvc::client
