// norm_bench: bandwidth of the LayerNorm/RMSNorm kernels against a
// device-to-device copy of the same bytes, measured in the same run.
//
//   norm_bench [flags]   (bench_options.h lists them and what they do)
//
// Large shapes: median of CUDA-event timings over N launches rotating among
// 3 buffer sets of >= 64 MB each (the H200's L2 is 60 MB). GB/s counts the
// minimum bytes: forward reads x (+gamma/beta) and writes out; backward reads
// x and dy and writes dx. The copy moves the same number of bytes (read +
// write). Small batches and multi-segment launches are timed per call from
// CUDA graph replay.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench_options.h"
#include "bench_report.h"
#include "bench_timing.h"
#include "kernel_registry.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"
#include "policy_names.h"

namespace normsvc::bench {
namespace {

using kernels::BackwardArgs;
using kernels::DType;
using kernels::ForwardSegment;
using kernels::NormOp;

constexpr int kSets = 3;
// The large shapes' element count (--elements), and the pools' size: that
// and 2^16 more, so that rows = ceil(N / H) always fit.
int64_t large_elements = int64_t{1} << 24;
int64_t PoolElements() { return large_elements + (int64_t{1} << 16); }
int64_t LargeRows(int64_t hidden) { return (large_elements + hidden - 1) / hidden; }

// The forward shapes' affine parameters (--affine), and whether they add a
// residual and write the sum out (--residual).
Affine forward_affine = Affine::kFull;
bool forward_residual = false;

struct Pool {  // per dtype: x and out hold 1.5x elements for the backward copy
  void* x[kSets];
  void* dy[kSets];
  void* out[kSets];
  void* sum[kSets];  // --residual's sums (null without it)
  void* gamma;
  void* beta;
  float* mean;
  float* rstd;
};

Pool MakePool(DType dtype) {
  Pool p;
  const std::size_t size = kernels::DTypeSize(dtype);
  for (int s = 0; s < kSets; ++s) {
    p.x[s] = RandomDeviceArray(dtype, PoolElements() * 3 / 2, -2.0f, 2.0f, 11 + s);
    p.dy[s] = RandomDeviceArray(dtype, PoolElements(), -1.0f, 1.0f, 101 + s);
    p.out[s] = DeviceArray(PoolElements() * 3 / 2 * size);
    p.sum[s] = forward_residual ? DeviceArray(PoolElements() * size) : nullptr;
  }
  p.gamma = RandomDeviceArray(dtype, 1 << 20, 0.5f, 1.5f, 7);
  p.beta = RandomDeviceArray(dtype, 1 << 20, -0.5f, 0.5f, 8);
  p.mean = static_cast<float*>(DeviceArray(PoolElements() * sizeof(float)));
  p.rstd = static_cast<float*>(DeviceArray(PoolElements() * sizeof(float)));
  return p;
}

std::string PlanName(const kernels::detail::KernelPlan& p) {
  const char* layout[] = {"vector", "strided", "streamed", "staged"};
  char text[96];
  std::snprintf(text, sizeof(text), "%s V%d W%d RT%d G%d K%d", layout[static_cast<int>(p.layout)],
                p.slots, p.width, p.row_threads, p.groups, p.cluster);
  return text;
}

// The plan a backward of contiguous rows from 16-byte aligned buffers takes
// (BackwardRealignKernel's, named "realign", where it serves).
std::string BackwardPlanName(int64_t hidden, DType dtype, NormOp op) {
  const kernels::detail::KernelPlan realign = kernels::detail::PlanBackwardRealign(hidden, dtype);
  if (realign.slots > 0 && kernels::detail::BackwardRealignEnabled()) {
    return "realign" + PlanName(realign).substr(std::strlen("vector"));
  }
  return PlanName(kernels::detail::PlanBackward(hidden, dtype, op));
}

ForwardSegment Segment(NormOp op, DType dtype, int64_t rows, int64_t hidden, const void* x,
                       void* out, const Pool& pool) {
  ForwardSegment s;
  s.op = op;
  s.rows = rows;
  s.hidden = hidden;
  s.x_dtype = s.out_dtype = s.param_dtype = dtype;
  s.x = x;
  s.out = out;
  s.x_row_stride = s.out_row_stride = hidden;
  s.gamma = forward_affine == Affine::kNone ? nullptr : pool.gamma;
  s.beta = op == NormOp::kLayerNorm && forward_affine == Affine::kFull ? pool.beta : nullptr;
  return s;
}

Record Forward(NormOp op, DType dtype, int64_t hidden, const Pool& pool, int iterations,
               cudaStream_t stream) {
  const int64_t rows = LargeRows(hidden);
  const std::size_t size = kernels::DTypeSize(dtype);
  Record r{forward_residual ? "forward_residual" : "forward",
           kernels::NormOpName(op),
           kernels::DTypeName(dtype),
           PlanName(kernels::detail::PlanForward(hidden, dtype)),
           rows,
           hidden};
  int params = 0;  // gamma and beta arrays read
  if (forward_affine != Affine::kNone) params = 1;
  if (forward_affine == Affine::kFull && op == NormOp::kLayerNorm) params = 2;
  const int64_t tensors = forward_residual ? 4 : 2;  // x (and residual) read, out (and sum) written
  r.bytes = static_cast<double>(rows * hidden * tensors * size + params * hidden * size);
  r.micros = MedianMicros(kSets, iterations, stream, [&](int s) {
    ForwardSegment segment = Segment(op, dtype, rows, hidden, pool.x[s], pool.out[s], pool);
    if (forward_residual) {
      segment.residual = pool.dy[s];
      segment.residual_out = pool.sum[s];
      segment.residual_row_stride = segment.residual_out_row_stride = hidden;
    }
    CheckStatus(kernels::LaunchForwardSegment(segment, stream), "forward");
  });
  // The same bytes copied: x into out (and the residual into the sums).
  const auto copy_bytes = static_cast<std::size_t>(r.bytes / static_cast<double>(tensors));
  r.copy_micros = MedianMicros(kSets, iterations, stream, [&](int s) {
    Check(cudaMemcpyAsync(pool.out[s], pool.x[s], copy_bytes, cudaMemcpyDeviceToDevice, stream),
          "copy");
    if (!forward_residual) return;
    Check(cudaMemcpyAsync(pool.sum[s], pool.dy[s], copy_bytes, cudaMemcpyDeviceToDevice, stream),
          "copy");
  });
  return r;
}

// `dx_only`: no dgamma/dbeta (no partials, no column reduction), recorded as
// kind backward_dx: what the row pass alone costs.
Record Backward(NormOp op, DType dtype, int64_t hidden, const Pool& pool, int iterations,
                cudaStream_t stream, bool dx_only) {
  const int64_t rows = LargeRows(hidden);
  const std::size_t size = kernels::DTypeSize(dtype);
  Record r{dx_only ? "backward_dx" : "backward",
           kernels::NormOpName(op),
           kernels::DTypeName(dtype),
           BackwardPlanName(hidden, dtype, op),
           rows,
           hidden};
  r.bytes = static_cast<double>(rows * hidden * 3 * size);
  // Saved statistics from a forward pass over set 0 (all sets are alike).
  ForwardSegment f = Segment(op, dtype, rows, hidden, pool.x[0], pool.out[0], pool);
  f.mean = op == NormOp::kLayerNorm ? pool.mean : nullptr;
  f.rstd = pool.rstd;
  CheckStatus(kernels::LaunchForwardSegment(f, stream), "forward for statistics");
  const std::size_t workspace_bytes = kernels::BackwardWorkspaceBytes(rows, hidden);
  void* workspace = DeviceArray(workspace_bytes);
  float* dgamma = static_cast<float*>(DeviceArray(2 * hidden * sizeof(float)));
  r.micros = MedianMicros(kSets, iterations, stream, [&](int s) {
    BackwardArgs a;
    a.op = op;
    a.rows = rows;
    a.hidden = hidden;
    a.x_dtype = a.param_dtype = dtype;
    a.x = pool.x[s];
    a.dy = pool.dy[s];
    a.dx = pool.out[s];
    a.x_row_stride = a.dy_row_stride = a.dx_row_stride = hidden;
    a.gamma = pool.gamma;
    a.mean = op == NormOp::kLayerNorm ? pool.mean : nullptr;
    a.rstd = pool.rstd;
    a.dgamma = dx_only ? nullptr : dgamma;
    a.dbeta = op == NormOp::kLayerNorm && !dx_only ? dgamma + hidden : nullptr;
    CheckStatus(kernels::LaunchBackward(a, workspace, workspace_bytes, stream), "backward");
  });
  r.copy_micros = MedianMicros(kSets, iterations, stream, [&](int s) {
    Check(cudaMemcpyAsync(pool.out[s], pool.x[s], static_cast<std::size_t>(r.bytes / 2),
                          cudaMemcpyDeviceToDevice, stream),
          "copy");
  });
  cudaFree(workspace);
  cudaFree(dgamma);
  return r;
}

// Per-call time of small bf16 LayerNorm batches from graph replay.
Record SmallBatch(int64_t rows, int64_t hidden, const Pool& pool, cudaStream_t stream) {
  Record r{"small_batch", "layer_norm",
           "bf16",        PlanName(kernels::detail::PlanForward(hidden, DType::kBF16)),
           rows,          hidden};
  r.bytes = static_cast<double>(rows * hidden * 2 * 2 + 2 * hidden * 2);
  r.micros = GraphMicrosPerCall(100, 20, stream, [&](int i) {
    const int s = i % kSets;
    CheckStatus(kernels::LaunchForwardSegment(Segment(NormOp::kLayerNorm, DType::kBF16, rows,
                                                      hidden, pool.x[s], pool.out[s], pool),
                                              stream),
                "small batch");
  });
  r.copy_micros = GraphMicrosPerCall(100, 20, stream, [&](int i) {
    const int s = i % kSets;
    Check(cudaMemcpyAsync(pool.out[s], pool.x[s], rows * hidden * 2, cudaMemcpyDeviceToDevice,
                          stream),
          "copy");
  });
  return r;
}

// `count` one-row bf16 LayerNorm segments of buffer set `set`, their rows
// spread over the buffer as a batch of independent requests is.
std::vector<ForwardSegment> OneRowSegments(const Pool& pool, int set, int64_t count,
                                           int64_t hidden) {
  std::vector<ForwardSegment> segments;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = (i * 7919) % count;
    segments.push_back(Segment(NormOp::kLayerNorm, DType::kBF16, 1, hidden,
                               static_cast<const char*>(pool.x[set]) + row * hidden * 2,
                               static_cast<char*>(pool.out[set]) + row * hidden * 2, pool));
  }
  return segments;
}

// How a segment case hands its table to the kernel.
enum class TableDelivery {
  // LaunchForward with pinned staging: the kernels read the table in place
  // over the bus for segments of one or two rows on average, else it is
  // copied to the device on the stream first.
  kMappedStaging,
  // As the server does: built into pinned staging, copied to the device on
  // the stream, then LaunchForwardWithUploadedTable. Every block of a
  // segment of many rows reads the segment's entry, so a table read over
  // the bus costs those blocks a bus round trip each. Unlike the server,
  // whose table travels in the copy of its inputs, the table is copied on
  // its own inside the timed interval: its latency and hand-off count.
  kUploaded,
};

// One launch of each set's `segments` (the table built on the host and
// delivered as `delivery` says, included) into r->micros, and one bf16
// LayerNorm tensor of the same rows x H into r->copy_micros ("copy"
// columns), eager (events) or from graph replay.
void TimeTableAgainstTensor(const Pool& pool, cudaStream_t stream, bool graph,
                            TableDelivery delivery,
                            const std::vector<ForwardSegment> (&segments)[kSets], Record* r) {
  const int count = static_cast<int>(segments[0].size());
  const std::size_t table_bytes = kernels::ForwardWorkspaceBytes(count);
  void* workspace = DeviceArray(table_bytes);
  // A staging buffer must stay untouched until its launch has run: one per
  // call (event timing queues up to 59 calls ahead of the device).
  constexpr int kStaging = 64;
  std::vector<void*> staging(kStaging);
  for (void*& p : staging) Check(cudaMallocHost(&p, table_bytes), "cudaMallocHost");
  int calls = 0;
  auto many = [&](int i) {
    const ForwardSegment* set = segments[i % kSets].data();
    void* host_table = staging[calls++ % kStaging];
    if (delivery == TableDelivery::kMappedStaging) {
      CheckStatus(kernels::LaunchForward(set, count, workspace, table_bytes, host_table, stream),
                  "multi-segment");
      return;
    }
    std::size_t written = 0;
    CheckStatus(
        kernels::WriteForwardTable(set, count, workspace, table_bytes, host_table, &written),
        "segment table");
    if (written > 0) {
      Check(cudaMemcpyAsync(workspace, host_table, written, cudaMemcpyHostToDevice, stream),
            "table upload");
    }
    CheckStatus(kernels::LaunchForwardWithUploadedTable(set, count, workspace, table_bytes, stream),
                "multi-segment");
  };
  auto one = [&](int i) {
    const int s = i % kSets;
    CheckStatus(kernels::LaunchForwardSegment(Segment(NormOp::kLayerNorm, DType::kBF16, r->rows,
                                                      r->hidden, pool.x[s], pool.out[s], pool),
                                              stream),
                "one tensor");
  };
  r->micros =
      graph ? GraphMicrosPerCall(1, 50, stream, many) : MedianMicros(kSets, 50, stream, many);
  r->copy_micros =
      graph ? GraphMicrosPerCall(1, 50, stream, one) : MedianMicros(kSets, 50, stream, one);
  Check(cudaStreamSynchronize(stream), "synchronize");
  for (void* p : staging) cudaFreeHost(p);
  cudaFree(workspace);
}

// 1,000 one-row segments of H = 4096 in one LaunchForward against one
// 1000 x 4096 tensor.
Record MultiSegment(const Pool& pool, cudaStream_t stream, bool graph) {
  const int64_t hidden = 4096, count = 1000;
  Record r{graph ? "multi_segment_graph" : "multi_segment_events",
           "layer_norm",
           "bf16",
           "1000 segments vs 1 tensor",
           count,
           hidden};
  r.bytes = static_cast<double>(count * hidden * 2 * 2);
  std::vector<ForwardSegment> segments[kSets];
  for (int s = 0; s < kSets; ++s) segments[s] = OneRowSegments(pool, s, count, hidden);
  TimeTableAgainstTensor(pool, stream, graph, TableDelivery::kMappedStaging, segments, &r);
  return r;
}

// The most elements a segment case below normalizes (RealignedSegments').
constexpr int64_t kSegmentCaseElements = int64_t{64} * 128 * 2049;

// A server batch of realigned requests: 64 segments of 128 rows of
// H = 2049 (rows off a 16-byte boundary) in one launch, against one
// 8192 x 2049 tensor (one segment), eager, the table uploaded as the server
// uploads it: what a table of segments costs the realigning kernels.
// With kMappedStaging (`realigned_segments_mapped`) through LaunchForward
// with pinned staging, which reads the table in place only for segments of
// one or two rows: this batch's table is copied.
Record RealignedSegments(const Pool& pool, cudaStream_t stream, TableDelivery delivery) {
  const int64_t hidden = 2049, count = 64, rows_each = 128;
  Record r{
      delivery == TableDelivery::kUploaded ? "realigned_segments" : "realigned_segments_mapped",
      "layer_norm",
      "bf16",
      "64 segments vs 1 tensor",
      count * rows_each,
      hidden};
  r.bytes = static_cast<double>(r.rows * hidden * 2 * 2);
  std::vector<ForwardSegment> segments[kSets];
  for (int s = 0; s < kSets; ++s) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t offset = i * rows_each * hidden * 2;
      segments[s].push_back(Segment(NormOp::kLayerNorm, DType::kBF16, rows_each, hidden,
                                    static_cast<const char*>(pool.x[s]) + offset,
                                    static_cast<char*>(pool.out[s]) + offset, pool));
    }
  }
  TimeTableAgainstTensor(pool, stream, false, delivery, segments, &r);
  return r;
}

// Where the multi-segment time goes, from graph replay: `micros` is the
// kernel of the 1,000-segment launch alone (its table uploaded beforehand),
// `copy_micros` the upload of that table alone.
Record SegmentTableParts(const Pool& pool, cudaStream_t stream) {
  const int64_t hidden = 4096, count = 1000;
  Record r{"segment_table_parts", "layer_norm", "bf16", "kernel vs table upload", count, hidden};
  r.bytes = static_cast<double>(count * hidden * 2 * 2);
  const std::size_t workspace_bytes = kernels::ForwardWorkspaceBytes(count);
  void* workspace = DeviceArray(workspace_bytes);
  void* staging = nullptr;
  Check(cudaMallocHost(&staging, workspace_bytes), "cudaMallocHost");
  const std::vector<ForwardSegment> segments = OneRowSegments(pool, 0, count, hidden);
  std::size_t table_bytes = 0;
  CheckStatus(kernels::WriteForwardTable(segments.data(), count, workspace, workspace_bytes,
                                         staging, &table_bytes),
              "segment table");
  Check(cudaMemcpy(workspace, staging, table_bytes, cudaMemcpyHostToDevice), "table upload");
  r.micros = GraphMicrosPerCall(1, 50, stream, [&](int) {
    CheckStatus(kernels::LaunchForwardWithUploadedTable(segments.data(), count, workspace,
                                                        workspace_bytes, stream),
                "multi-segment kernel");
  });
  r.copy_micros = GraphMicrosPerCall(1, 50, stream, [&](int) {
    Check(cudaMemcpyAsync(workspace, staging, table_bytes, cudaMemcpyHostToDevice, stream),
          "table upload");
  });
  Check(cudaStreamSynchronize(stream), "synchronize");
  cudaFreeHost(staging);
  cudaFree(workspace);
  return r;
}

}  // namespace
}  // namespace normsvc::bench

int main(int argc, char** argv) {
  using namespace normsvc::bench;
  using normsvc::kernels::detail::GetRingPolicy;
  BenchOptions options;
  if (const int exit_code = ParseBenchOptions(argc, argv, &options); exit_code >= 0) {
    return exit_code;
  }
  large_elements = options.large_elements;
  forward_affine = options.affine;
  forward_residual = options.residual;
  const int iterations = options.iterations;
  const bool forward_only = options.forward_only;
  const bool backward_only = options.backward_only;
  const int64_t only_hidden = options.only_hidden;
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf(
      "device: %s, %d SMs, L2 %d MB, ring %s, param_staging %s, realign %s, partials discarded "
      "%s, large shapes of %lld elements, forward affine %s%s\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, RingPolicyName(GetRingPolicy()),
      ParamStagingName(normsvc::kernels::detail::GetParamStaging()),
      NameOf(kRealignPolicies, normsvc::kernels::detail::GetRealignPolicy()),
      normsvc::kernels::detail::GetDiscardPartials() ? "on" : "off",
      static_cast<long long>(large_elements), AffineName(forward_affine),
      forward_residual ? " with a residual" : "");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  std::vector<Record> records;
  std::vector<int64_t> hiddens =
      options.quick ? std::vector<int64_t>{1024, 2049, 4096}
                    : std::vector<int64_t>{768, 1024, 2049, 4096, 8192, 16384, 65536};
  if (only_hidden > 0) hiddens = {only_hidden};
  const bool narrowed = only_hidden > 0 || backward_only;
  // fp16 only when asked for: the default table (and compare_torch.py's) is
  // the issue's, bf16 and fp32.
  const std::vector<DType> dtypes = options.only_dtype == "fp16"
                                        ? std::vector<DType>{DType::kF16}
                                        : std::vector<DType>{DType::kBF16, DType::kF32};
  for (DType dtype : dtypes) {
    if (!options.only_dtype.empty() && options.only_dtype != normsvc::kernels::DTypeName(dtype))
      continue;
    const Pool pool = MakePool(dtype);
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      if (!backward_only) {
        for (int64_t h : hiddens)
          records.push_back(Forward(op, dtype, h, pool, iterations, stream));
      }
      if (forward_only) continue;
      for (int64_t h : hiddens)
        records.push_back(
            Backward(op, dtype, h, pool, iterations, stream, options.backward_dx_only));
    }
    if (dtype == DType::kBF16 && !narrowed) {
      for (int64_t rows : {1, 8, 64}) records.push_back(SmallBatch(rows, 4096, pool, stream));
      // Where the time of one row goes: a small row and a warp-sized one.
      for (int64_t h : {64, 1024}) records.push_back(SmallBatch(1, h, pool, stream));
      // The segment cases' rows must fit the pools, which --elements below
      // 2^24 shrinks.
      if (PoolElements() >= kSegmentCaseElements) {
        records.push_back(MultiSegment(pool, stream, false));
        records.push_back(MultiSegment(pool, stream, true));
        records.push_back(RealignedSegments(pool, stream, TableDelivery::kUploaded));
        records.push_back(RealignedSegments(pool, stream, TableDelivery::kMappedStaging));
        records.push_back(SegmentTableParts(pool, stream));
      } else {
        std::printf("(multi-segment cases skipped: --elements below %lld)\n",
                    static_cast<long long>(kSegmentCaseElements));
      }
    }
  }
  PrintTable(records);
  if (options.json != nullptr) {
    WriteJson(options.json, records, prop, {large_elements, forward_affine, forward_residual});
  }
  return 0;
}
