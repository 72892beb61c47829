#include "server/cpu_executor.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "normsvc/kernels/reference.h"
#include "server/parameter_store.h"
#include "server/status_mapping.h"
#include "server/usable_cpus.h"

namespace normsvc::server {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// memcpy bandwidth of this host, bytes read + written per second.
double MeasureCopyBandwidth() {
  constexpr size_t kBytes = size_t{16} << 20;
  std::vector<char> from(kBytes, 1), to(kBytes);
  std::memcpy(to.data(), from.data(), kBytes);  // warm-up: page in
  const auto start = std::chrono::steady_clock::now();
  constexpr int kRounds = 3;
  for (int i = 0; i < kRounds; ++i) {
    from[i] = static_cast<char>(i);
    std::memcpy(to.data(), from.data(), kBytes);
  }
  const double elapsed = Seconds(std::chrono::steady_clock::now() - start);
  return elapsed > 0 ? 2.0 * kRounds * kBytes / elapsed : 0.0;
}

// 64-byte aligned copies of the forward inputs that a batch's tasks left in
// gRPC's receive buffers split over pieces or misaligned (Task::received):
// the reference kernels read a tensor as one array of its element type.
class GatheredInputs {
 public:
  // `pointer` unchanged where `received` is absent or readable in place.
  const void* Resolve(const void* pointer, const ReceivedBytes* received) {
    if (received == nullptr || received->ReadableInPlace(kInPlaceAlignment)) return pointer;
    const auto bytes = static_cast<std::size_t>(received->size());
    void* copy = ::operator new (bytes, std::align_val_t{kAlignment});
    copies_.emplace_back(copy);
    received->CopyTo(0, received->size(), copy);
    return copy;
  }

 private:
  static constexpr std::size_t kInPlaceAlignment = 16;  // one 16-byte vector
  static constexpr std::size_t kAlignment = 64;
  struct Free {
    void operator()(void* p) const { ::operator delete (p, std::align_val_t{kAlignment}); }
  };
  std::vector<std::unique_ptr<void, Free>> copies_;
};

}  // namespace

CpuExecutor::CpuExecutor(const CpuExecutorOptions& options) : options_(options) {
  if (options_.slots < 1) options_.slots = 1;
  if (options_.threads_per_batch <= 0) {
    options_.threads_per_batch = std::max(1, UsableCpus() / options_.slots);
  }
  device_.label = "cpu";
  device_.index = -1;
  device_.name = "cpu (reference kernels)";
  device_.copy_bandwidth_bytes_per_second = MeasureCopyBandwidth();
}

BatchResult CpuExecutor::Run(const Batch& batch, int /*slot*/) {
  try {
    return RunOnReference(batch);
  } catch (const std::bad_alloc&) {
    // Gathering a batch's inputs allocates; out of memory, every task of
    // the batch fails instead of the process.
    BatchResult result;
    result.statuses.assign(batch.tasks.size(),
                           absl::ResourceExhaustedError("the CPU executor ran out of memory"));
    return result;
  }
}

BatchResult CpuExecutor::RunOnReference(const Batch& batch) {
  BatchResult result;
  const kernels::ReferenceOptions reference{options_.threads_per_batch};
  const auto start = std::chrono::steady_clock::now();
  if (batch.is_backward()) {
    const Task& task = *batch.tasks.front();
    kernels::BackwardArgs args = task.backward;
    if (task.parameters) args.gamma = task.parameters->gamma(options_.executor_index);
    result.statuses.push_back(FromKernelStatus(kernels::ReferenceBackward(args, reference)));
  } else {
    std::vector<kernels::ForwardSegment> segments;
    segments.reserve(batch.tasks.size());
    GatheredInputs gathered;
    for (const auto& task : batch.tasks) {
      kernels::ForwardSegment segment = task->forward;
      if (const ReceivedInputs& r = task->received; r.any()) {
        segment.x = gathered.Resolve(segment.x, r.x);
        segment.residual = gathered.Resolve(segment.residual, r.residual);
        segment.gamma = gathered.Resolve(segment.gamma, r.gamma);
        segment.beta = gathered.Resolve(segment.beta, r.beta);
      }
      if (task->parameters) {
        segment.gamma = task->parameters->gamma(options_.executor_index);
        segment.beta = task->parameters->beta(options_.executor_index);
      }
      segments.push_back(segment);
    }
    const absl::Status status = FromKernelStatus(
        kernels::ReferenceForward(segments.data(), static_cast<int>(segments.size()), reference));
    if (status.ok()) {
      result.statuses.assign(segments.size(), absl::OkStatus());
    } else {
      // Edge validation should make this unreachable; attribute the error to
      // the tasks it belongs to by running them one by one.
      for (const kernels::ForwardSegment& segment : segments) {
        result.statuses.push_back(
            FromKernelStatus(kernels::ReferenceForward(&segment, 1, reference)));
      }
    }
  }
  result.kernel_seconds = Seconds(std::chrono::steady_clock::now() - start);
  result.kernel_bytes = batch.input_bytes + batch.output_bytes;
  return result;
}

absl::StatusOr<DeviceBuffer> CpuExecutor::Upload(const void* host, std::size_t bytes) {
  // 64-byte aligned, like device allocations are aligned for vector loads.
  void* copy = ::operator new (bytes, std::align_val_t{64});
  std::memcpy(copy, host, bytes);
  return DeviceBuffer(copy, [](void* p) { ::operator delete (p, std::align_val_t{64}); });
}

}  // namespace normsvc::server
