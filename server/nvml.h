// GPU telemetry from NVML, loaded with dlopen("libnvidia-ml.so.1") so the
// build needs no NVML and a machine without a driver simply reports
// nothing. Exposed as a prometheus Collectable sampled at scrape time,
// under the names Triton uses: nv_gpu_utilization (0..1),
// nv_gpu_memory_used_bytes, nv_gpu_memory_total_bytes, label gpu_uuid.
#pragma once

#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace normsvc::server {

class GpuTelemetry final : public prometheus::Collectable {
 public:
  // `pci_bus_ids` of the GPUs the server uses (as CUDA reports them).
  explicit GpuTelemetry(const std::vector<std::string>& pci_bus_ids);
  ~GpuTelemetry() override;
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  // True when NVML loaded and found at least one of the devices.
  bool available() const { return !devices_.empty(); }
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Api;
  struct Device {
    void* handle = nullptr;
    std::string uuid;
  };
  void* library_ = nullptr;
  Api* api_ = nullptr;
  std::vector<Device> devices_;
};

}  // namespace normsvc::server
