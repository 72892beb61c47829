#include "server/kserve_stream.h"

#include <grpcpp/server_context.h>

#include "absl/strings/str_cat.h"

#include "server/kserve_infer.h"
#include "server/status_mapping.h"

namespace normsvc::server {
namespace {

using StreamReactor =
    grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>;

// Only one gRPC operation is outstanding at any time (a read, or the run,
// or a write), so the reactor needs no lock; OnCancel only sets a flag.
class KserveStreamCall final : public StreamReactor, public KserveInference {
 public:
  KserveStreamCall(ServiceContext& service, KserveStatistics& statistics)
      : KserveInference(service, statistics) {}

  void Begin() { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // half-closed (or cancelled)
    reply_.Clear();
    RunInference(&request_, reply_.mutable_infer_response(), absl::InfiniteFuture());
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    StartRead(&request_);
  }

  void OnCancel() override { MarkCancelled(); }
  void OnDone() override { delete this; }

 private:
  void OnInferenceDone(const absl::Status& status) override {
    if (refused_for_drain()) return Finish(ToGrpcStatus(status));
    if (!status.ok()) {
      reply_.set_error_message(absl::StrCat(StatusCodeName(status.code()), ": ", status.message()));
      reply_.mutable_infer_response()->set_model_name(request_.model_name());
      reply_.mutable_infer_response()->set_id(request_.id());
    }
    StartWrite(&reply_);
  }

  inference::ModelInferRequest request_;
  inference::ModelStreamInferResponse reply_;
};

}  // namespace

StreamReactor* StartKserveModelStreamInfer(ServiceContext& service, KserveStatistics& statistics,
                                           grpc::CallbackServerContext* /*context*/) {
  auto* call = new KserveStreamCall(service, statistics);
  call->Begin();
  return call;
}

}  // namespace normsvc::server
