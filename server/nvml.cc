#include "server/nvml.h"

#include <dlfcn.h>

#include "server/log.h"

namespace normsvc::server {

// The few NVML entry points used, declared here (ABI of nvml.h) so that no
// NVML header or library is needed at build time.
struct GpuTelemetry::Api {
  using Return = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
  struct Memory {
    unsigned long long total, free, used;
  };
  struct Utilization {
    unsigned int gpu, memory;
  };
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  Return (*by_pci_bus_id)(const char*, void**) = nullptr;
  Return (*uuid)(void*, char*, unsigned int) = nullptr;
  Return (*memory)(void*, Memory*) = nullptr;
  Return (*utilization)(void*, Utilization*) = nullptr;
};

namespace {

template <typename F>
bool Resolve(void* library, const char* name, F* function) {
  *function = reinterpret_cast<F>(dlsym(library, name));
  return *function != nullptr;
}

prometheus::ClientMetric GaugeSample(const std::string& uuid, double value) {
  prometheus::ClientMetric metric;
  metric.label.push_back({"gpu_uuid", uuid});
  metric.gauge.value = value;
  return metric;
}

}  // namespace

GpuTelemetry::GpuTelemetry(const std::vector<std::string>& pci_bus_ids) {
  if (pci_bus_ids.empty()) return;
  library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    Log(LogLevel::kWarning, "NVML not available (libnvidia-ml.so.1): no nv_gpu_* metrics");
    return;
  }
  auto api = std::make_unique<Api>();
  const bool resolved =
      Resolve(library_, "nvmlInit_v2", &api->init) &&
      Resolve(library_, "nvmlShutdown", &api->shutdown) &&
      Resolve(library_, "nvmlDeviceGetHandleByPciBusId_v2", &api->by_pci_bus_id) &&
      Resolve(library_, "nvmlDeviceGetUUID", &api->uuid) &&
      Resolve(library_, "nvmlDeviceGetMemoryInfo", &api->memory) &&
      Resolve(library_, "nvmlDeviceGetUtilizationRates", &api->utilization);
  if (!resolved || api->init() != 0) {
    Log(LogLevel::kWarning, "NVML could not be initialized: no nv_gpu_* metrics");
    dlclose(library_);
    library_ = nullptr;
    return;
  }
  api_ = api.release();
  for (const std::string& bus_id : pci_bus_ids) {
    Device device;
    char uuid[96] = {};
    if (api_->by_pci_bus_id(bus_id.c_str(), &device.handle) != 0 ||
        api_->uuid(device.handle, uuid, sizeof(uuid)) != 0) {
      Log(LogLevel::kWarning, "NVML does not know the GPU at PCI bus ", bus_id);
      continue;
    }
    device.uuid = uuid;
    devices_.push_back(device);
  }
}

GpuTelemetry::~GpuTelemetry() {
  if (api_ != nullptr) api_->shutdown();
  delete api_;
  if (library_ != nullptr) dlclose(library_);
}

std::vector<prometheus::MetricFamily> GpuTelemetry::Collect() const {
  if (devices_.empty()) return {};
  prometheus::MetricFamily utilization{
      "nv_gpu_utilization", "GPU utilization (0..1), from NVML", prometheus::MetricType::Gauge, {}};
  prometheus::MetricFamily used{
      "nv_gpu_memory_used_bytes", "GPU memory used, from NVML", prometheus::MetricType::Gauge, {}};
  prometheus::MetricFamily total{"nv_gpu_memory_total_bytes",
                                 "GPU memory total, from NVML",
                                 prometheus::MetricType::Gauge,
                                 {}};
  for (const Device& device : devices_) {
    Api::Utilization rates{};
    if (api_->utilization(device.handle, &rates) == 0) {
      utilization.metric.push_back(GaugeSample(device.uuid, rates.gpu / 100.0));
    }
    Api::Memory memory{};
    if (api_->memory(device.handle, &memory) == 0) {
      used.metric.push_back(GaugeSample(device.uuid, static_cast<double>(memory.used)));
      total.metric.push_back(GaugeSample(device.uuid, static_cast<double>(memory.total)));
    }
  }
  return {utilization, used, total};
}

}  // namespace normsvc::server
