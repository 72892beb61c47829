#include "server/gpu_executor.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "normsvc/kernels/gpu.h"
#include "server/log.h"
#include "server/parameter_store.h"
#include "server/spin_pause.h"

namespace normsvc::server {
namespace {

int64_t Size(kernels::DType dtype) { return static_cast<int64_t>(kernels::DTypeSize(dtype)); }

// Copies `bytes` from `from` to `to` unless absent (offset -1 / null).
void CopyIn(char* staging, int64_t offset, const void* from, int64_t bytes) {
  if (offset >= 0 && from != nullptr && bytes > 0) std::memcpy(staging + offset, from, bytes);
}
// The same for a forward input: from gRPC's receive buffers when the task
// left it there (Task::received), else from `from` + `skip`.
void CopyInputIn(char* staging, int64_t offset, const void* from, const ReceivedBytes* received,
                 int64_t skip, int64_t bytes) {
  if (offset < 0 || from == nullptr || bytes <= 0) return;
  if (received != nullptr) {
    received->CopyTo(skip, bytes, staging + offset);
  } else {
    std::memcpy(staging + offset, static_cast<const char*>(from) + skip, bytes);
  }
}
void CopyOut(void* to, const char* staging, int64_t offset, int64_t bytes) {
  if (offset >= 0 && to != nullptr && bytes > 0) std::memcpy(to, staging + offset, bytes);
}
const char* At(const void* base, int64_t bytes) { return static_cast<const char*>(base) + bytes; }
char* At(void* base, int64_t bytes) { return static_cast<char*>(base) + bytes; }

}  // namespace

#define NORMSVC_CUDA_TRY(call)                                                             \
  do {                                                                                     \
    const cudaError_t cuda_error = (call);                                                 \
    if (cuda_error != cudaSuccess) {                                                       \
      return absl::InternalError(                                                          \
          absl::StrCat(device_.label, ": ", #call, ": ", cudaGetErrorString(cuda_error))); \
    }                                                                                      \
  } while (false)

absl::StatusOr<std::unique_ptr<GpuExecutor>> GpuExecutor::Create(
    const GpuExecutorOptions& options) {
  std::unique_ptr<GpuExecutor> executor(new GpuExecutor(options));
  if (absl::Status status = executor->Initialize(); !status.ok()) return status;
  return executor;
}

absl::Status GpuExecutor::Initialize() {
  device_.label = absl::StrCat("cuda:", options_.device);
  device_.index = options_.device;
  NORMSVC_CUDA_TRY(cudaSetDevice(options_.device));
  cudaDeviceProp properties{};
  NORMSVC_CUDA_TRY(cudaGetDeviceProperties(&properties, options_.device));
  device_.name = properties.name;
  device_.memory_total_bytes = static_cast<int64_t>(properties.totalGlobalMem);
  device_.compute_capability = absl::StrCat(properties.major, ".", properties.minor);
  char bus_id[32] = {};
  NORMSVC_CUDA_TRY(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), options_.device));
  device_.pci_bus_id = bus_id;

  const std::size_t staging = static_cast<std::size_t>(options_.staging_bytes);
  const std::size_t workspace = static_cast<std::size_t>(BackwardWorkspaceBound(
      options_.staging_bytes, options_.max_hidden, options_.max_request_rows));
  device_.backward_workspace_bytes = static_cast<int64_t>(workspace);
  slots_.resize(std::max(1, options_.slots));
  for (Slot& slot : slots_) {
    NORMSVC_CUDA_TRY(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking));
    // A multiple of 256 bytes: the staging buffer after it stays aligned.
    slot.table_bytes = kernels::ForwardWorkspaceBytes(static_cast<int>(options_.max_batch_tasks));
    NORMSVC_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&slot.host), slot.table_bytes + staging,
                                   cudaHostAllocDefault));
    slot.host += slot.table_bytes;
    NORMSVC_CUDA_TRY(
        cudaMalloc(reinterpret_cast<void**>(&slot.device), slot.table_bytes + staging));
    slot.device += slot.table_bytes;
    for (cudaEvent_t* event : {&slot.start, &slot.h2d, &slot.kernel}) {
      NORMSVC_CUDA_TRY(cudaEventCreate(event));
    }
    // Blocking sync makes cudaEventSynchronize sleep; WaitForRound spins on
    // cudaEventQuery instead when the batch should not.
    NORMSVC_CUDA_TRY(cudaEventCreateWithFlags(&slot.d2h, cudaEventBlockingSync));
    slot.segments.reserve(static_cast<std::size_t>(options_.max_batch_tasks));
    if (workspace > 0) {
      const cudaError_t allocated = cudaMalloc(&slot.backward_workspace, workspace);
      if (allocated == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return absl::ResourceExhaustedError(
            absl::StrCat(device_.label, ": no device memory for the backward workspace of ",
                         workspace, " bytes a batch slot, ", slots_.size(),
                         " slots (--batches_in_flight); its size follows --max_hidden_size ",
                         options_.max_hidden, ", --max_request_rows ", options_.max_request_rows,
                         " and --staging_buffer_bytes ", options_.staging_bytes));
      }
      NORMSVC_CUDA_TRY(allocated);
      slot.backward_workspace_bytes = workspace;
    }
    device_.device_buffer_bytes += static_cast<int64_t>(staging + slot.table_bytes + workspace);
  }
  MeasureCopyBandwidth();
  return absl::OkStatus();
}

GpuExecutor::~GpuExecutor() {
  cudaSetDevice(options_.device);
  for (Slot& slot : slots_) {
    if (slot.stream != nullptr) cudaStreamSynchronize(slot.stream);
    for (cudaEvent_t event : {slot.start, slot.h2d, slot.kernel, slot.d2h}) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    if (slot.backward_workspace != nullptr) cudaFree(slot.backward_workspace);
    if (slot.device != nullptr) cudaFree(slot.device - slot.table_bytes);
    if (slot.host != nullptr) cudaFreeHost(slot.host - slot.table_bytes);
    if (slot.stream != nullptr) cudaStreamDestroy(slot.stream);
  }
  cudaGetLastError();
}

void GpuExecutor::MeasureCopyBandwidth() {
  // Device-to-device copies between the halves of slot 0's buffer: the
  // reference for the kernels' achieved bandwidth (bytes read + written).
  Slot& slot = slots_.front();
  const std::size_t half = static_cast<std::size_t>(options_.staging_bytes) / 2;
  constexpr int kRounds = 5;
  float ms = 0;
  bool ok = cudaMemcpyAsync(slot.device + half, slot.device, half, cudaMemcpyDeviceToDevice,
                            slot.stream) == cudaSuccess &&
            cudaEventRecord(slot.start, slot.stream) == cudaSuccess;
  for (int i = 0; ok && i < kRounds; ++i) {
    ok = cudaMemcpyAsync(slot.device + half, slot.device, half, cudaMemcpyDeviceToDevice,
                         slot.stream) == cudaSuccess;
  }
  ok = ok && cudaEventRecord(slot.d2h, slot.stream) == cudaSuccess &&
       cudaEventSynchronize(slot.d2h) == cudaSuccess &&
       cudaEventElapsedTime(&ms, slot.start, slot.d2h) == cudaSuccess;
  cudaGetLastError();
  device_.copy_bandwidth_bytes_per_second = ok && ms > 0 ? 2.0 * kRounds * half / (ms * 1e-3) : 0.0;
}

BatchResult GpuExecutor::Run(const Batch& batch, int slot_index) {
  BatchResult result;
  const std::size_t n = batch.tasks.size();
  if (!healthy()) {
    result.statuses.assign(
        n, absl::UnavailableError(
               absl::StrCat(device_.label, " is out of service after an unrecoverable error")));
    return result;
  }
  Slot& slot = slots_[slot_index];
  slot.block =
      options_.wait == GpuWait::kBlock || (options_.wait == GpuWait::kAuto && batch.more_queued);
  Timings timings;
  const uint64_t interval =
      static_cast<uint64_t>(std::max<int64_t>(options_.timed_batch_interval, 1));
  timings.timed = batches_run_.fetch_add(1, std::memory_order_relaxed) % interval == 0;
  absl::Status status;
  if (const cudaError_t error = cudaSetDevice(options_.device); error != cudaSuccess) {
    status = absl::InternalError(
        absl::StrCat(device_.label, ": cudaSetDevice: ", cudaGetErrorString(error)));
  } else if (n == 1 && batch.staging_bytes > options_.staging_bytes) {
    status = RunOversized(*batch.tasks.front(), slot, &timings);
  } else {
    std::vector<TaskSlice> slices;
    slices.reserve(n);
    for (const auto& task : batch.tasks) slices.push_back({task.get(), 0, task->rows});
    status = RunRound(slices, slot, &timings, nullptr);
  }
  result.statuses.assign(n, status);
  if (status.ok()) {
    if (timings.timed) {
      result.h2d_seconds = timings.h2d;
      result.kernel_seconds = timings.kernel;
      result.d2h_seconds = timings.d2h;
    } else {
      result.stages_untimed = true;
    }
    result.kernel_bytes = batch.input_bytes + batch.output_bytes;
  }
  return result;
}

absl::Status GpuExecutor::RunOversized(const Task& task, Slot& slot, Timings* timings) {
  const int64_t rows_per_round = MaxRowsInStaging(task, options_.staging_bytes);
  if (rows_per_round < 1) {
    return absl::ResourceExhaustedError(
        absl::StrCat("one row of this request needs more than the ", options_.staging_bytes,
                     " bytes of staging buffer (--staging_buffer_bytes)"));
  }
  const bool backward = task.kind == TaskKind::kBackward;
  GradientSums sums;
  if (backward) {
    if (task.backward.dgamma != nullptr) sums.dgamma.assign(task.hidden, 0.0);
    if (task.backward.dbeta != nullptr) sums.dbeta.assign(task.hidden, 0.0);
  }
  for (int64_t begin = 0; begin < task.rows; begin += rows_per_round) {
    const TaskSlice slice{&task, begin, std::min(rows_per_round, task.rows - begin)};
    absl::Status status = RunRound(std::span(&slice, 1), slot, timings, backward ? &sums : nullptr);
    if (!status.ok()) return status;
  }
  for (int64_t i = 0; i < static_cast<int64_t>(sums.dgamma.size()); ++i) {
    task.backward.dgamma[i] = static_cast<float>(sums.dgamma[i]);
  }
  for (int64_t i = 0; i < static_cast<int64_t>(sums.dbeta.size()); ++i) {
    task.backward.dbeta[i] = static_cast<float>(sums.dbeta[i]);
  }
  return absl::OkStatus();
}

absl::Status GpuExecutor::CheckBackwardWorkspace(const Slot& slot, std::size_t bytes) const {
  if (bytes <= slot.backward_workspace_bytes) return absl::OkStatus();
  // BackwardWorkspaceBound covers every chunk the edge's limits allow.
  return absl::InternalError(absl::StrCat(device_.label, ": a backward chunk needs ", bytes,
                                          " bytes of workspace, more than the ",
                                          slot.backward_workspace_bytes, " allocated at start"));
}

cudaError_t GpuExecutor::WaitForRound(const Slot& slot) {
  if (slot.block) return cudaEventSynchronize(slot.d2h);
  cudaError_t state;
  while ((state = cudaEventQuery(slot.d2h)) == cudaErrorNotReady) SpinPause();
  return state;
}

void GpuExecutor::Recover(Slot& slot) {
  // Let whatever was enqueued finish so the staging buffer is free again,
  // then clear the error. An error that survives clearing is sticky: the
  // context is unusable until the process restarts.
  const cudaError_t first = cudaStreamSynchronize(slot.stream);
  cudaGetLastError();
  if (first != cudaSuccess && cudaStreamSynchronize(slot.stream) != cudaSuccess) {
    healthy_.store(false);
    Log(LogLevel::kError, device_.label, ": unrecoverable CUDA error (", cudaGetErrorString(first),
        "); no more batches are routed to this device");
  }
}

absl::Status GpuExecutor::RunRound(std::span<const TaskSlice> slices, Slot& slot, Timings* timings,
                                   GradientSums* sums) {
  const StagingPlan plan = PlanStaging(slices);
  if (plan.total_bytes > options_.staging_bytes) {
    return absl::InternalError(absl::StrCat(device_.label, ": a batch of ", plan.total_bytes,
                                            " bytes does not fit the staging buffer"));
  }
  const bool backward = slices.front().task->kind == TaskKind::kBackward;
  const int index = options_.executor_index;
  auto device = [&slot](int64_t offset) -> char* {
    return offset < 0 ? nullptr : slot.device + offset;
  };

  // Pack the inputs into pinned memory and describe the launch in device
  // pointers.
  kernels::BackwardArgs backward_args;
  slot.segments.clear();
  for (size_t i = 0; i < slices.size(); ++i) {
    const TaskSlice& s = slices[i];
    const Task& t = *s.task;
    const StagingOffsets& o = plan.slices[i];
    if (!backward) {
      const kernels::ForwardSegment& f = t.forward;
      const int64_t row_bytes = t.hidden * Size(f.x_dtype);
      const ReceivedInputs& r = t.received;
      CopyInputIn(slot.host, o.x, f.x, r.x, s.row_begin * row_bytes, s.rows * row_bytes);
      CopyInputIn(slot.host, o.residual, f.residual, r.residual, s.row_begin * row_bytes,
                  s.rows * row_bytes);
      CopyInputIn(slot.host, o.gamma, f.gamma, r.gamma, 0, t.hidden * Size(f.param_dtype));
      CopyInputIn(slot.host, o.beta, f.beta, r.beta, 0, t.hidden * Size(f.param_dtype));
      kernels::ForwardSegment segment = f;
      segment.rows = s.rows;
      segment.x = device(o.x);
      segment.residual = device(o.residual);
      segment.residual_out = device(o.residual_out);
      segment.out = device(o.out);
      segment.mean = reinterpret_cast<float*>(device(o.mean));
      segment.rstd = reinterpret_cast<float*>(device(o.rstd));
      segment.gamma = t.parameters ? t.parameters->gamma(index) : device(o.gamma);
      segment.beta = t.parameters ? t.parameters->beta(index) : device(o.beta);
      slot.segments.push_back(segment);
    } else {
      const kernels::BackwardArgs& b = t.backward;
      const int64_t row_bytes = t.hidden * Size(b.x_dtype);
      CopyIn(slot.host, o.x, At(b.x, s.row_begin * row_bytes), s.rows * row_bytes);
      CopyIn(slot.host, o.dy, At(b.dy, s.row_begin * row_bytes), s.rows * row_bytes);
      CopyIn(slot.host, o.gamma, b.gamma, t.hidden * Size(b.param_dtype));
      if (b.mean != nullptr) CopyIn(slot.host, o.saved_mean, b.mean + s.row_begin, s.rows * 4);
      if (b.rstd != nullptr) CopyIn(slot.host, o.saved_rstd, b.rstd + s.row_begin, s.rows * 4);
      backward_args = b;
      backward_args.rows = s.rows;
      backward_args.x = device(o.x);
      backward_args.dy = device(o.dy);
      backward_args.gamma = t.parameters ? t.parameters->gamma(index) : device(o.gamma);
      backward_args.mean = reinterpret_cast<const float*>(device(o.saved_mean));
      backward_args.rstd = reinterpret_cast<const float*>(device(o.saved_rstd));
      backward_args.dx = device(o.out);
      backward_args.dgamma = reinterpret_cast<float*>(device(o.dgamma));
      backward_args.dbeta = reinterpret_cast<float*>(device(o.dbeta));
    }
  }
  if (backward) {
    const std::size_t workspace =
        kernels::BackwardWorkspaceBytes(backward_args.rows, backward_args.hidden);
    if (absl::Status status = CheckBackwardWorkspace(slot, workspace); !status.ok()) return status;
  }
  // The segment table room ends where the inputs begin, so the table and
  // the inputs are one H2D copy of copy_before + input_bytes bytes.
  const int segment_count = static_cast<int>(slot.segments.size());
  const std::size_t table_room = kernels::ForwardWorkspaceBytes(segment_count);
  std::size_t table_bytes = 0;
  if (!backward) {
    if (table_room > slot.table_bytes) {
      return absl::InternalError(absl::StrCat(device_.label, ": a batch of ", segment_count,
                                              " tasks has no room for its segment table"));
    }
    const kernels::Status written =
        kernels::WriteForwardTable(slot.segments.data(), segment_count, slot.device - table_room,
                                   table_room, slot.host - table_room, &table_bytes);
    if (!written.ok()) {
      return absl::InternalError(absl::StrCat(device_.label, ": launch: ", written.message()));
    }
  }
  const std::size_t copy_before = table_bytes > 0 ? table_room : 0;

  // One H2D copy (the table and the inputs), the launch, one D2H copy, on
  // the slot's stream.
  auto enqueue = [&]() -> absl::Status {
    if (inject_fault_.exchange(false)) {
      // Test hook: a copy with an invalid direction fails inside the CUDA
      // runtime, exactly where a real copy error would.
      NORMSVC_CUDA_TRY(
          cudaMemcpyAsync(slot.device, slot.host, 1, static_cast<cudaMemcpyKind>(99), slot.stream));
    }
    if (timings->timed) NORMSVC_CUDA_TRY(cudaEventRecord(slot.start, slot.stream));
    NORMSVC_CUDA_TRY(cudaMemcpyAsync(slot.device - copy_before, slot.host - copy_before,
                                     copy_before + plan.input_bytes, cudaMemcpyHostToDevice,
                                     slot.stream));
    if (timings->timed) NORMSVC_CUDA_TRY(cudaEventRecord(slot.h2d, slot.stream));
    const kernels::Status launched =
        backward ? kernels::LaunchBackward(backward_args, slot.backward_workspace,
                                           slot.backward_workspace_bytes, slot.stream)
                 : kernels::LaunchForwardWithUploadedTable(slot.segments.data(), segment_count,
                                                           slot.device - table_room, table_room,
                                                           slot.stream);
    if (!launched.ok()) {
      return absl::InternalError(absl::StrCat(device_.label, ": launch: ", launched.message()));
    }
    if (timings->timed) NORMSVC_CUDA_TRY(cudaEventRecord(slot.kernel, slot.stream));
    NORMSVC_CUDA_TRY(cudaMemcpyAsync(slot.host + plan.input_bytes, slot.device + plan.input_bytes,
                                     plan.total_bytes - plan.input_bytes, cudaMemcpyDeviceToHost,
                                     slot.stream));
    NORMSVC_CUDA_TRY(cudaEventRecord(slot.d2h, slot.stream));
    NORMSVC_CUDA_TRY(WaitForRound(slot));
    if (!timings->timed) return absl::OkStatus();
    float h2d_ms = 0, kernel_ms = 0, d2h_ms = 0;
    NORMSVC_CUDA_TRY(cudaEventElapsedTime(&h2d_ms, slot.start, slot.h2d));
    NORMSVC_CUDA_TRY(cudaEventElapsedTime(&kernel_ms, slot.h2d, slot.kernel));
    NORMSVC_CUDA_TRY(cudaEventElapsedTime(&d2h_ms, slot.kernel, slot.d2h));
    timings->h2d += h2d_ms * 1e-3;
    timings->kernel += kernel_ms * 1e-3;
    timings->d2h += d2h_ms * 1e-3;
    return absl::OkStatus();
  };
  if (absl::Status status = enqueue(); !status.ok()) {
    Recover(slot);
    return status;
  }

  // Unpack the outputs into the responses.
  for (size_t i = 0; i < slices.size(); ++i) {
    const TaskSlice& s = slices[i];
    const Task& t = *s.task;
    const StagingOffsets& o = plan.slices[i];
    if (!backward) {
      const kernels::ForwardSegment& f = t.forward;
      const int64_t out_row = t.hidden * Size(f.out_dtype);
      const int64_t x_row = t.hidden * Size(f.x_dtype);
      CopyOut(At(f.out, s.row_begin * out_row), slot.host, o.out, s.rows * out_row);
      if (f.residual_out != nullptr) {
        CopyOut(At(f.residual_out, s.row_begin * x_row), slot.host, o.residual_out, s.rows * x_row);
      }
      if (f.mean != nullptr) CopyOut(f.mean + s.row_begin, slot.host, o.mean, s.rows * 4);
      if (f.rstd != nullptr) CopyOut(f.rstd + s.row_begin, slot.host, o.rstd, s.rows * 4);
    } else {
      const kernels::BackwardArgs& b = t.backward;
      const int64_t row_bytes = t.hidden * Size(b.x_dtype);
      CopyOut(At(b.dx, s.row_begin * row_bytes), slot.host, o.out, s.rows * row_bytes);
      if (sums == nullptr) {
        CopyOut(b.dgamma, slot.host, o.dgamma, t.hidden * 4);
        CopyOut(b.dbeta, slot.host, o.dbeta, t.hidden * 4);
      } else {
        auto accumulate = [&](std::vector<double>& sum, int64_t offset) {
          if (offset < 0) return;
          const float* part = reinterpret_cast<const float*>(slot.host + offset);
          for (size_t k = 0; k < sum.size(); ++k) sum[k] += part[k];
        };
        accumulate(sums->dgamma, o.dgamma);
        accumulate(sums->dbeta, o.dbeta);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> GpuExecutor::Upload(const void* host, std::size_t bytes) {
  if (!in_service()) {
    return absl::UnavailableError(absl::StrCat(device_.label, " is out of service"));
  }
  NORMSVC_CUDA_TRY(cudaSetDevice(options_.device));
  void* memory = nullptr;
  if (const cudaError_t allocated = cudaMalloc(&memory, bytes);
      allocated == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: the device goes on serving
    return absl::ResourceExhaustedError(
        absl::StrCat(device_.label, ": no device memory for a parameter set of ", bytes, " bytes"));
  } else if (allocated != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat(device_.label, ": parameter upload: ", cudaGetErrorString(allocated)));
  }
  // `host` is pageable (the request's bytes): cudaMemcpy from pageable
  // memory may return once the bytes are staged, before they reach the
  // device, and the batch streams (non-blocking) do not wait for the legacy
  // stream. Waiting for the legacy stream here means no kernel can see the
  // set before its bytes have landed (the set is published after this
  // returns), and a failed copy is seen here.
  cudaError_t error =
      cudaMemcpyAsync(memory, host, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy);
  if (error == cudaSuccess) error = cudaStreamSynchronize(cudaStreamLegacy);
  if (error != cudaSuccess) {
    cudaFree(memory);
    return absl::InternalError(
        absl::StrCat(device_.label, ": parameter upload: ", cudaGetErrorString(error)));
  }
  const int device = options_.device;
  return DeviceBuffer(memory, [device, hung = taken_out_of_service_flag()](void* pointer) {
    // A hung device's memory is left to the process's end: cudaFree waits
    // for the device.
    if (hung->load(std::memory_order_acquire)) return;
    // The last holder may be any thread, with any current device.
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    cudaFree(pointer);
    cudaSetDevice(previous);
  });
}

}  // namespace normsvc::server
