#include "normsvc/client/client.h"

#include <atomic>
#include <chrono>
#include <future>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

namespace normsvc::client {
namespace {

// Callbacks run on gRPC's threads, after the call that the caller's thread
// started: gRPC orders the two in its core. A release by the starting thread
// and an acquire in the callback state that order in C++ terms, where
// ThreadSanitizer sees it.
using Handoff = std::atomic<bool>;

// Starts a callback-API unary call that owns its context and messages.
template <typename Request, typename Response, typename Invoke>
void StartUnary(Request request, const CallOptions& options, Callback<Response> done,
                Invoke invoke) {
  struct Call {
    grpc::ClientContext context;
    Request request;
    Response response;
    Callback<Response> done;
    Handoff started{false};
  };
  auto* call = new Call;
  call->request = std::move(request);
  call->done = std::move(done);
  ConfigureContext(options, &call->context);
  call->started.store(true, std::memory_order_release);
  invoke(&call->context, &call->request, &call->response, [call](grpc::Status status) {
    call->started.load(std::memory_order_acquire);
    std::unique_ptr<Call> owned(call);
    if (status.ok()) {
      owned->done(std::move(owned->response));
    } else {
      owned->done(ToAbslStatus(status));
    }
  });
}

// Blocking call through the stub's blocking method.
template <typename Response, typename Invoke>
absl::StatusOr<Response> CallBlocking(const CallOptions& options, Invoke invoke) {
  grpc::ClientContext context;
  ConfigureContext(options, &context);
  Response response;
  grpc::Status status = invoke(&context, &response);
  if (!status.ok()) return ToAbslStatus(status);
  return response;
}

// grpc.health.v1 messages are two fields; they are encoded here by hand so
// that the client carries no second copy of the health proto.
std::string EncodeHealthCheckRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;
  out += '\x0a';  // field 1, length-delimited
  uint64_t length = service.size();
  while (length >= 0x80) {
    out += static_cast<char>((length & 0x7f) | 0x80);
    length >>= 7;
  }
  out += static_cast<char>(length);
  out += service;
  return out;
}

ServingStatus DecodeHealthCheckResponse(const std::string& bytes) {
  // Field 1 (varint): status. Other fields are skipped only if they are
  // varints; the message has no others.
  size_t pos = 0;
  while (pos < bytes.size()) {
    const uint8_t tag = static_cast<uint8_t>(bytes[pos++]);
    uint64_t value = 0;
    int shift = 0;
    while (pos < bytes.size() && shift < 64) {
      const uint8_t byte = static_cast<uint8_t>(bytes[pos++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      shift += 7;
      if ((byte & 0x80) == 0) break;
    }
    if (tag == 0x08 && value <= 3) return static_cast<ServingStatus>(value);
    if ((tag & 7) != 0) break;
  }
  return ServingStatus::kUnknown;
}

}  // namespace

void ConfigureContext(const CallOptions& options, grpc::ClientContext* context) {
  if (options.timeout != absl::InfiniteDuration()) {
    context->set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoNanoseconds(options.timeout));
  }
  context->set_wait_for_ready(options.wait_for_ready);
}

absl::Status ToAbslStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

const char* ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    default:
      return "UNKNOWN";
  }
}

NormalizerClient::NormalizerClient(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), stub_(v1::Normalizer::NewStub(channel_)) {}

absl::StatusOr<v1::NormalizeResponse> NormalizerClient::Normalize(
    const v1::NormalizeRequest& request, const CallOptions& options) {
  return CallBlocking<v1::NormalizeResponse>(options, [&](auto* context, auto* response) {
    return stub_->Normalize(context, request, response);
  });
}

absl::StatusOr<v1::NormalizeBackwardResponse> NormalizerClient::NormalizeBackward(
    const v1::NormalizeBackwardRequest& request, const CallOptions& options) {
  return CallBlocking<v1::NormalizeBackwardResponse>(options, [&](auto* context, auto* response) {
    return stub_->NormalizeBackward(context, request, response);
  });
}

absl::StatusOr<v1::RegisterParametersResponse> NormalizerClient::RegisterParameters(
    const v1::RegisterParametersRequest& request, const CallOptions& options) {
  return CallBlocking<v1::RegisterParametersResponse>(options, [&](auto* context, auto* response) {
    return stub_->RegisterParameters(context, request, response);
  });
}

absl::Status NormalizerClient::DeleteParameters(const std::string& name,
                                                const CallOptions& options) {
  v1::DeleteParametersRequest request;
  request.set_name(name);
  return CallBlocking<v1::DeleteParametersResponse>(options,
                                                    [&](auto* context, auto* response) {
                                                      return stub_->DeleteParameters(
                                                          context, request, response);
                                                    })
      .status();
}

absl::StatusOr<v1::ListParametersResponse> NormalizerClient::ListParameters(
    const CallOptions& options) {
  return CallBlocking<v1::ListParametersResponse>(options, [&](auto* context, auto* response) {
    return stub_->ListParameters(context, v1::ListParametersRequest(), response);
  });
}

absl::StatusOr<v1::GetServerInfoResponse> NormalizerClient::GetServerInfo(
    const CallOptions& options) {
  return CallBlocking<v1::GetServerInfoResponse>(options, [&](auto* context, auto* response) {
    return stub_->GetServerInfo(context, v1::GetServerInfoRequest(), response);
  });
}

absl::StatusOr<ServingStatus> NormalizerClient::CheckHealth(const std::string& service,
                                                            const CallOptions& options) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  ConfigureContext(options, &context);
  const std::string encoded = EncodeHealthCheckRequest(service);
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> finished;
  Handoff started{false};
  started.store(true, std::memory_order_release);
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&finished, &started](grpc::Status status) {
                      started.load(std::memory_order_acquire);
                      finished.set_value(status);
                    });
  const grpc::Status status = finished.get_future().get();
  if (!status.ok()) return ToAbslStatus(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("unreadable health response");
  std::string bytes;
  for (const grpc::Slice& part : slices) {
    bytes.append(reinterpret_cast<const char*>(part.begin()), part.size());
  }
  return DecodeHealthCheckResponse(bytes);
}

absl::StatusOr<std::vector<v1::NormalizeStreamResponse>> NormalizerClient::NormalizeStreamAll(
    const std::vector<v1::NormalizeRequest>& requests, const CallOptions& options) {
  std::vector<v1::NormalizeStreamResponse> responses;
  std::mutex mutex;
  {
    NormalizeStream stream(stub_.get(), options, [&](const v1::NormalizeStreamResponse& response) {
      std::lock_guard<std::mutex> lock(mutex);
      responses.push_back(response);
    });
    for (const v1::NormalizeRequest& request : requests) stream.Write(request);
    if (absl::Status status = stream.Finish(); !status.ok()) return status;
  }
  return responses;
}

void NormalizerClient::NormalizeAsync(v1::NormalizeRequest request, const CallOptions& options,
                                      Callback<v1::NormalizeResponse> done) {
  StartUnary(std::move(request), options, std::move(done),
             [this](auto* context, auto* req, auto* resp, auto on_done) {
               stub_->async()->Normalize(context, req, resp, std::move(on_done));
             });
}

void NormalizerClient::NormalizeBackwardAsync(v1::NormalizeBackwardRequest request,
                                              const CallOptions& options,
                                              Callback<v1::NormalizeBackwardResponse> done) {
  StartUnary(std::move(request), options, std::move(done),
             [this](auto* context, auto* req, auto* resp, auto on_done) {
               stub_->async()->NormalizeBackward(context, req, resp, std::move(on_done));
             });
}

void NormalizerClient::RegisterParametersAsync(v1::RegisterParametersRequest request,
                                               const CallOptions& options,
                                               Callback<v1::RegisterParametersResponse> done) {
  StartUnary(std::move(request), options, std::move(done),
             [this](auto* context, auto* req, auto* resp, auto on_done) {
               stub_->async()->RegisterParameters(context, req, resp, std::move(on_done));
             });
}

void NormalizerClient::DeleteParametersAsync(v1::DeleteParametersRequest request,
                                             const CallOptions& options,
                                             Callback<v1::DeleteParametersResponse> done) {
  StartUnary(std::move(request), options, std::move(done),
             [this](auto* context, auto* req, auto* resp, auto on_done) {
               stub_->async()->DeleteParameters(context, req, resp, std::move(on_done));
             });
}

void NormalizerClient::ListParametersAsync(const CallOptions& options,
                                           Callback<v1::ListParametersResponse> done) {
  StartUnary(v1::ListParametersRequest(), options, std::move(done),
             [this](auto* context, auto* req, auto* resp, auto on_done) {
               stub_->async()->ListParameters(context, req, resp, std::move(on_done));
             });
}

void NormalizerClient::GetServerInfoAsync(const CallOptions& options,
                                          Callback<v1::GetServerInfoResponse> done) {
  StartUnary(v1::GetServerInfoRequest(), options, std::move(done),
             [this](auto* context, auto* req, auto* resp, auto on_done) {
               stub_->async()->GetServerInfo(context, req, resp, std::move(on_done));
             });
}

std::unique_ptr<NormalizeStream> NormalizerClient::OpenStream(
    const CallOptions& options,
    std::function<void(const v1::NormalizeStreamResponse&)> on_response) {
  return std::make_unique<NormalizeStream>(stub_.get(), options, std::move(on_response));
}

// ---- NormalizeStream

NormalizeStream::NormalizeStream(
    v1::Normalizer::Stub* stub, const CallOptions& options,
    std::function<void(const v1::NormalizeStreamResponse&)> on_response)
    : on_response_(std::move(on_response)) {
  ConfigureContext(options, &context_);
  stub->async()->NormalizeStream(&context_, this);
  AddHold();  // released by ReleaseHoldLocked
  StartRead(&response_);
  started_.store(true, std::memory_order_release);
  StartCall();
}

NormalizeStream::~NormalizeStream() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_) {
    context_.TryCancel();
    write_failed_ = true;  // starts no more writes; a write in flight releases the hold
    if (!writing_ && ReleaseHoldLocked()) {
      lock.unlock();
      RemoveHold();
      lock.lock();
    }
    done_cv_.wait(lock, [this] { return done_; });
  }
}

void NormalizeStream::Write(v1::NormalizeRequest request) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back(std::move(request));
  if (!writing_) StartNextWriteLocked();
}

void NormalizeStream::WritesDone() {
  bool release = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    writes_done_requested_ = true;
    if (!writing_) {
      StartNextWriteLocked();
      release = writes_done_started_ && ReleaseHoldLocked();
    }
  }
  if (release) RemoveHold();
}

void NormalizeStream::StartNextWriteLocked() {
  if (write_failed_ || done_) return;  // nothing may start after the stream ended
  if (!pending_.empty()) {
    writing_ = true;
    StartWrite(&pending_.front());
  } else if (writes_done_requested_ && !writes_done_started_) {
    writes_done_started_ = true;
    StartWritesDone();
  }
}

bool NormalizeStream::ReleaseHoldLocked() {
  if (hold_released_) return false;
  hold_released_ = true;
  return true;
}

void NormalizeStream::OnWriteDone(bool ok) {
  started_.load(std::memory_order_acquire);
  bool release = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.pop_front();
    writing_ = false;
    if (!ok) {
      write_failed_ = true;  // the stream is broken; OnDone reports why
    } else {
      StartNextWriteLocked();
    }
    // No more writes: the stream failed, or it half-closed.
    if (write_failed_ || writes_done_started_) release = ReleaseHoldLocked();
  }
  if (release) RemoveHold();
}

void NormalizeStream::OnReadDone(bool ok) {
  started_.load(std::memory_order_acquire);
  if (!ok) {
    // The call has ended (the server finished it, or it was cancelled or
    // broken): no write may start any more, and OnDone must not wait for one.
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      write_failed_ = true;
      if (!writing_) release = ReleaseHoldLocked();  // a write in flight releases it
    }
    if (release) RemoveHold();
    return;
  }
  on_response_(response_);
  StartRead(&response_);
}

void NormalizeStream::OnDone(const grpc::Status& status) {
  started_.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(mutex_);
  final_status_ = status;
  done_ = true;
  done_cv_.notify_all();
}

absl::Status NormalizeStream::Finish() {
  WritesDone();
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return done_; });
  return ToAbslStatus(final_status_);
}

}  // namespace normsvc::client
