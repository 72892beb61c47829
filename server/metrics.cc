#include "server/metrics.h"

#include <cmath>

#include <prometheus/family.h>

namespace normsvc::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

std::vector<double> PowersOfTwo(double first, int count) {
  std::vector<double> bounds;
  bounds.reserve(count);
  for (int i = 0; i < count; ++i) bounds.push_back(first * std::ldexp(1.0, i));
  return bounds;
}

const char* OpLabel(int op) {
  static constexpr const char* kNames[] = {"layer_norm", "rms_norm", "none"};
  return kNames[op];
}
const char* DTypeLabel(int dtype) {
  static constexpr const char* kNames[] = {"fp32", "fp16", "bf16", "none"};
  return kNames[dtype];
}
bool HasTensors(int method) {
  switch (static_cast<Method>(method)) {
    case Method::kNormalize:
    case Method::kNormalizeStream:
    case Method::kNormalizeBackward:
    case Method::kModelInfer:
    case Method::kModelStreamInfer:
      return true;
    default:
      return false;
  }
}
int OpIndex(std::optional<kernels::NormOp> op) {
  if (!op) return 2;
  return *op == kernels::NormOp::kLayerNorm ? 0 : 1;
}
int DTypeIndex(std::optional<kernels::DType> dtype) {
  if (!dtype) return 3;
  switch (*dtype) {
    case kernels::DType::kF32:
      return 0;
    case kernels::DType::kF16:
      return 1;
    case kernels::DType::kBF16:
      return 2;
  }
  return 3;
}

}  // namespace

const char* MethodName(Method method) {
  static constexpr const char* kNames[kMethodCount] = {
      "Normalize",        "NormalizeStream", "NormalizeBackward", "RegisterParameters",
      "DeleteParameters", "ListParameters",  "GetServerInfo",     "ModelInfer",
      "ModelStreamInfer", "ServerLive",      "ServerReady",       "ModelReady",
      "ServerMetadata",   "ModelMetadata",   "ModelConfig",       "ModelStatistics"};
  return kNames[static_cast<int>(method)];
}

std::vector<double> TimeBuckets() { return PowersOfTwo(1e-5, 21); }

ServiceMetrics::ServiceMetrics(const std::vector<std::string>& device_labels,
                               const BuildInfo& build)
    : registry_(std::make_shared<prometheus::Registry>()) {
  auto& requests = BuildCounter()
                       .Name("normsvc_requests_total")
                       .Help("Requests by method, op, dtype and gRPC status code")
                       .Register(*registry_);
  auto& rows = BuildCounter()
                   .Name("normsvc_request_rows_total")
                   .Help("Rows of successful requests by method, op and dtype")
                   .Register(*registry_);
  auto& durations = BuildHistogram()
                        .Name("normsvc_request_duration_seconds")
                        .Help("End-to-end request latency in the server, handler in to reply")
                        .Register(*registry_);
  for (int m = 0; m < kMethodCount; ++m) {
    const std::string method = MethodName(static_cast<Method>(m));
    durations_[m] = &durations.Add({{"method", method}}, TimeBuckets());
    for (int op = 0; op < kOps; ++op) {
      for (int dt = 0; dt < kDTypes; ++dt) {
        const bool none = op == kOps - 1 && dt == kDTypes - 1;
        if (!HasTensors(m) && !none) continue;
        for (int code = 0; code < kStatusCodeCount; ++code) {
          requests_[m][op][dt][code] =
              &requests.Add({{"method", method},
                             {"op", OpLabel(op)},
                             {"dtype", DTypeLabel(dt)},
                             {"code", StatusCodeName(static_cast<absl::StatusCode>(code))}});
        }
        if (HasTensors(m) && op < kOps - 1 && dt < kDTypes - 1) {
          rows_[m][op][dt] =
              &rows.Add({{"method", method}, {"op", OpLabel(op)}, {"dtype", DTypeLabel(dt)}});
        }
      }
    }
  }

  auto histogram = [this](const char* name,
                          const char* help) -> prometheus::Family<prometheus::Histogram>& {
    return BuildHistogram().Name(name).Help(help).Register(*registry_);
  };
  auto gauge = [this](const char* name,
                      const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return BuildGauge().Name(name).Help(help).Register(*registry_);
  };
  auto& queue_wait =
      histogram("normsvc_queue_wait_seconds", "Time a request waited in the batcher queue");
  // GPU executors time one batch in --timed_batch_interval.
  auto& h2d = histogram("normsvc_batch_h2d_seconds",
                        "Host-to-device copy time per timed batch (GPU: one in "
                        "--timed_batch_interval)");
  auto& kernel = histogram("normsvc_batch_kernel_seconds",
                           "Kernel time per timed batch (GPU: one in --timed_batch_interval)");
  auto& d2h = histogram("normsvc_batch_d2h_seconds",
                        "Device-to-host copy time per timed batch (GPU: one in "
                        "--timed_batch_interval)");
  auto& batch_rows = histogram("normsvc_batch_rows", "Rows per launch");
  auto& batch_requests = histogram("normsvc_batch_requests", "Requests per launch");
  auto& pending_requests = gauge("normsvc_pending_requests", "Requests queued, not yet launched");
  auto& pending_rows = gauge("normsvc_pending_rows", "Rows queued, not yet launched");
  auto& in_flight = gauge("normsvc_batches_in_flight", "Batches launched and not yet finished");
  auto& processed = BuildCounter()
                        .Name("normsvc_processed_bytes_total")
                        .Help("Bytes read and written by the kernels")
                        .Register(*registry_);
  auto& bandwidth = histogram("normsvc_kernel_bandwidth_bytes_per_second",
                              "Bytes read and written per second of kernel time, per batch");
  auto& copy_bandwidth = gauge("normsvc_device_copy_bandwidth_bytes_per_second",
                               "Copy bandwidth of the device measured at start-up (read + write)");
  for (const std::string& label : device_labels) {
    const prometheus::Labels labels{{"device", label}};
    DeviceMetrics d;
    d.queue_wait_seconds = &queue_wait.Add(labels, TimeBuckets());
    d.batch_h2d_seconds = &h2d.Add(labels, TimeBuckets());
    d.batch_kernel_seconds = &kernel.Add(labels, TimeBuckets());
    d.batch_d2h_seconds = &d2h.Add(labels, TimeBuckets());
    d.batch_rows = &batch_rows.Add(labels, PowersOfTwo(1, 21));
    d.batch_requests = &batch_requests.Add(labels, PowersOfTwo(1, 13));
    d.pending_requests = &pending_requests.Add(labels);
    d.pending_rows = &pending_rows.Add(labels);
    d.batches_in_flight = &in_flight.Add(labels);
    d.processed_bytes = &processed.Add(labels);
    d.kernel_bandwidth = &bandwidth.Add(labels, PowersOfTwo(1e8, 18));
    d.copy_bandwidth = &copy_bandwidth.Add(labels);
    devices_.push_back(d);
  }

  auto& rejected = BuildCounter()
                       .Name("normsvc_rejected_requests_total")
                       .Help("Requests refused or dropped before launch, by reason")
                       .Register(*registry_);
  rejections_.queue_full = &rejected.Add({{"reason", "queue_full"}});
  rejections_.deadline_exceeded = &rejected.Add({{"reason", "deadline_exceeded"}});
  rejections_.cancelled = &rejected.Add({{"reason", "cancelled"}});

  heap_releases_ = &BuildCounter()
                        .Name("normsvc_heap_releases_total")
                        .Help("Times freed heap memory was given back to the system while idle")
                        .Register(*registry_)
                        .Add({});
  heap_released_bytes_ = &BuildCounter()
                              .Name("normsvc_heap_released_bytes_total")
                              .Help("Resident bytes given back to the system while idle")
                              .Register(*registry_)
                              .Add({});

  gauge("normsvc_build_info", "Build of the running server (value 1)")
      .Add({{"version", build.version},
            {"git_commit", build.git_commit},
            {"cuda_version", build.cuda_version},
            {"backend", build.backend}})
      .Set(1);
}

void ServiceMetrics::RecordRequest(Method method, std::optional<kernels::NormOp> op,
                                   std::optional<kernels::DType> dtype, absl::StatusCode code,
                                   int64_t rows, double seconds) {
  const int m = static_cast<int>(method);
  int o = OpIndex(op), d = DTypeIndex(dtype);
  if (!HasTensors(m)) o = kOps - 1, d = kDTypes - 1;
  int c = static_cast<int>(code);
  if (c < 0 || c >= kStatusCodeCount) c = static_cast<int>(absl::StatusCode::kUnknown);
  requests_[m][o][d][c]->Increment();
  if (code == absl::StatusCode::kOk && rows_[m][o][d] != nullptr) {
    rows_[m][o][d]->Increment(static_cast<double>(rows));
  }
  durations_[m]->Observe(seconds);
}

}  // namespace normsvc::server
