// One ModelInfer on the normsvc.v1 path: protocol mapping
// (kserve_request), the same edge validation and Task building as
// Normalize, and the same ExecutorPool/batcher. The unary call
// (StartKserveModelInfer) and the stream (kserve_stream) both derive
// from KserveInference and only decide how the result goes back.
#pragma once

#include <atomic>
#include <optional>

#include <grpcpp/support/server_callback.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "inference/grpc_service.pb.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/kserve_models.h"
#include "server/kserve_statistics.h"
#include "server/metrics.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

class KserveInference : public TaskSink {
 public:
  // `method` labels the request metrics: kModelInfer or kModelStreamInfer.
  KserveInference(ServiceContext& service, KserveStatistics& statistics, Method method)
      : service_(service), statistics_(statistics), method_(method) {}

  // Runs `request` into `response` (both outlive the run); the request's
  // raw input bytes move into the run (ToNormalizeRequest). `received` not
  // OK: the request's bytes did not parse, and the run answers that (after
  // the drain gate, as every request). Exactly one OnInferenceDone
  // follows, inline or from a batch worker thread. One run at a time per
  // object.
  void RunInference(inference::ModelInferRequest* request, inference::ModelInferResponse* response,
                    absl::Time deadline, const absl::Status& received = absl::OkStatus());

  bool IsCancelled() const final { return cancelled_.load(std::memory_order_relaxed); }
  void OnTaskExecuted(const BatchExecution& execution) final { timing_.execution = execution; }
  // Kept until the reply is written (the stream: ReleaseReplyMemory) or the
  // call ends (unary: its deletion), so that --max_queued_bytes bounds
  // replies that wait for a slow client too.
  void HoldUntilReplied(MemoryReservation reservation) final {
    reservation_ = std::move(reservation);
  }
  void OnTaskDone(const absl::Status& status) final;

 protected:
  ~KserveInference() = default;
  // After this is called the run touches nothing of the object again.
  virtual void OnInferenceDone(const absl::Status& status) = 0;
  void MarkCancelled() { cancelled_.store(true, std::memory_order_relaxed); }
  // True when the last run was refused because the server is draining.
  bool refused_for_drain() const { return refused_for_drain_; }
  // The last run's reply has been written: its share of the budget goes back.
  void ReleaseReplyMemory() { reservation_ = MemoryReservation(); }

 private:
  void Complete(const absl::Status& status);

  ServiceContext& service_;
  KserveStatistics& statistics_;
  const Method method_;
  inference::ModelInferRequest* request_ = nullptr;
  inference::ModelInferResponse* response_ = nullptr;
  std::string model_name_;
  KserveModel model_;
  v1::NormalizeRequest normalize_request_;
  v1::NormalizeResponse normalize_response_;
  std::optional<kernels::DType> dtype_;  // INPUT's, for the metrics
  KserveInferTiming timing_;
  bool entered_ = false;
  bool refused_for_drain_ = false;
  MemoryReservation reservation_;
  std::atomic<bool> cancelled_{false};
};

// A raw method: the request's bytes in, the response's out (a request that
// does not parse is INVALID_ARGUMENT; raw_message.h).
grpc::ServerUnaryReactor* StartKserveModelInfer(ServiceContext& service,
                                                KserveStatistics& statistics,
                                                grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response);

}  // namespace normsvc::server
