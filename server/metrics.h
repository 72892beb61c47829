// ServiceMetrics: every Prometheus family of the service, registered once.
// Label sets are resolved at construction into plain handle tables, so the
// hot path indexes an array and updates an atomic (or the histogram's own
// lock); it never calls Family::Add and adds no lock of its own.
// Names and labels: notes in server-interface.md.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "normsvc/kernels/types.h"
#include "server/status_mapping.h"

namespace normsvc::server {

// The `method` label: the RPC's name. normsvc.v1.Normalizer first, then
// inference.GRPCInferenceService (KServe v2; RPCs it answers UNIMPLEMENTED
// are not counted). Tensor methods (Normalize, NormalizeStream,
// NormalizeBackward, ModelInfer, ModelStreamInfer) carry op and dtype;
// stream methods count one per message.
enum class Method : uint8_t {
  kNormalize,
  kNormalizeStream,
  kNormalizeBackward,
  kRegisterParameters,
  kDeleteParameters,
  kListParameters,
  kGetServerInfo,
  kModelInfer,
  kModelStreamInfer,
  kServerLive,
  kServerReady,
  kModelReady,
  kServerMetadata,
  kModelMetadata,
  kModelConfig,
  kModelStatistics,
};
inline constexpr int kMethodCount = 16;
const char* MethodName(Method method);

// Handles for one executor's device label.
struct DeviceMetrics {
  prometheus::Histogram* queue_wait_seconds = nullptr;
  prometheus::Histogram* batch_h2d_seconds = nullptr;
  prometheus::Histogram* batch_kernel_seconds = nullptr;
  prometheus::Histogram* batch_d2h_seconds = nullptr;
  prometheus::Histogram* batch_rows = nullptr;
  prometheus::Histogram* batch_requests = nullptr;
  prometheus::Gauge* pending_requests = nullptr;
  prometheus::Gauge* pending_rows = nullptr;
  prometheus::Gauge* batches_in_flight = nullptr;
  prometheus::Counter* processed_bytes = nullptr;
  prometheus::Histogram* kernel_bandwidth = nullptr;
  prometheus::Gauge* copy_bandwidth = nullptr;
};

struct RejectionMetrics {
  prometheus::Counter* queue_full = nullptr;
  prometheus::Counter* deadline_exceeded = nullptr;
  prometheus::Counter* cancelled = nullptr;
};

struct BuildInfo {
  std::string version;
  std::string git_commit;
  std::string cuda_version;  // "none" without CUDA
  std::string backend;       // "cuda" or "cpu"
};

// Exponential time buckets: 1e-5 s doubling up to about 10 s (21 bounds).
std::vector<double> TimeBuckets();

class ServiceMetrics {
 public:
  // `device_labels[i]` labels executor i ("cpu", "cuda:0", ...).
  ServiceMetrics(const std::vector<std::string>& device_labels, const BuildInfo& build);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  DeviceMetrics& device(int executor_index) { return devices_[executor_index]; }
  const RejectionMetrics& rejections() const { return rejections_; }
  // Idle heap releases (memory_release.h): how many, and the resident bytes
  // they gave back.
  prometheus::Counter& heap_releases() const { return *heap_releases_; }
  prometheus::Counter& heap_released_bytes() const { return *heap_released_bytes_; }

  // One finished request (or one request of a stream). `op` and `dtype` are
  // what the request named (nullopt: "none"; for ModelInfer the model's op
  // and INPUT's datatype); `rows` count only when OK.
  void RecordRequest(Method method, std::optional<kernels::NormOp> op,
                     std::optional<kernels::DType> dtype, absl::StatusCode code, int64_t rows,
                     double seconds);

 private:
  static constexpr int kOps = 3;     // layer_norm, rms_norm, none
  static constexpr int kDTypes = 4;  // fp32, fp16, bf16, none

  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<DeviceMetrics> devices_;
  RejectionMetrics rejections_;
  prometheus::Counter* heap_releases_ = nullptr;
  prometheus::Counter* heap_released_bytes_ = nullptr;
  // [method][op][dtype][code]; null where the combination cannot occur
  // (methods without tensors only have op = dtype = none).
  std::array<
      std::array<std::array<std::array<prometheus::Counter*, kStatusCodeCount>, kDTypes>, kOps>,
      kMethodCount>
      requests_{};
  std::array<std::array<std::array<prometheus::Counter*, kDTypes>, kOps>, kMethodCount> rows_{};
  std::array<prometheus::Histogram*, kMethodCount> durations_{};
};

}  // namespace normsvc::server
