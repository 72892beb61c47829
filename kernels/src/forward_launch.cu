// Host side of the forward pass: validation, grouping of segments by launch
// plan, the segment table upload, one kernel launch per plan.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "forward_realign_staged_kernel.cuh"
#include "forward_ring_kernel.cuh"
#include "forward_segments.h"
#include "kernel_params.h"
#include "kernel_registry.h"
#include "launch_common.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"
#include "param_cache.cuh"
#include "param_staging.h"
#include "realign_policy.h"
#include "ring_policy.h"
#include "segment_index.h"

namespace normsvc::kernels {
namespace detail {

namespace {

std::atomic<RingPolicy> ring_policy{RingPolicy::kTwoBlockClusters};
std::atomic<int64_t> ring_launches{0};
std::atomic<ParamStaging> param_staging{ParamStaging::kMultiWarpRows};
std::atomic<int64_t> param_staged_launches{0};
std::atomic<int64_t> realign_launches{0};
std::atomic<int64_t> staged_realign_launches{0};
std::atomic<int64_t> staged_launches{0};

}  // namespace

ParamStaging GetParamStaging() { return param_staging.load(std::memory_order_relaxed); }

void SetParamStaging(ParamStaging policy) {
  param_staging.store(policy, std::memory_order_relaxed);
}

int64_t ParamStagedForwardLaunches() {
  return param_staged_launches.load(std::memory_order_relaxed);
}

int64_t RealignForwardLaunches() { return realign_launches.load(std::memory_order_relaxed); }

int64_t StagedRealignForwardLaunches() {
  return staged_realign_launches.load(std::memory_order_relaxed);
}

int64_t StagedForwardLaunches() { return staged_launches.load(std::memory_order_relaxed); }

RingPolicy GetRingPolicy() { return ring_policy.load(std::memory_order_relaxed); }

void SetRingPolicy(RingPolicy policy) { ring_policy.store(policy, std::memory_order_relaxed); }

int64_t RingForwardLaunches() { return ring_launches.load(std::memory_order_relaxed); }

}  // namespace detail

namespace {

using detail::DeviceSegment;
using detail::ForwardParams;
using detail::ForwardPath;
using detail::KernelPlan;
using detail::Layout;

// The table image: every segment's DeviceSegment, then every first row,
// then the row -> segment index (at most one bucket a segment).
constexpr std::size_t kTableEntryBytes =
    sizeof(DeviceSegment) + sizeof(int64_t) + sizeof(detail::SegmentBucket);

// The specialized kernels (parameters staged or not) and the realigning
// ones take a block (or cluster) per row group, up to kMaxFastUnits of them
// looping over the rest; RMSNorm's realigning launches are persistent. The
// general row-register kernels are persistent: at most one wave of blocks,
// each looping over its rows (a row's arithmetic does not depend on which
// block or iteration handles it), with a gamma/beta cache in dynamic shared
// memory. The staged kernel is persistent too (one wave of clusters, each
// row's chunks in its blocks' shared memory); the streamed kernel takes one
// block per row.
constexpr int64_t kMaxFastUnits = int64_t{1} << 20;

// Every forward kernel begins with BeginDependentGrid (grid_dependency.cuh),
// so every forward launch may overlap the previous kernel's tail.
constexpr bool kEarlyLaunch = true;

// Units (blocks, or clusters of plan.cluster blocks) of `kernel` that fit on
// the device at once; 0 when the query fails. Clusters are counted by the
// runtime (ResidentClusters), not as blocks / cluster: a persistent
// cluster launched beyond those that fit waits until one of them has done
// all its rows, then does its own (BENCHMARKS.md, round 28).
int64_t ResidentUnits(detail::ForwardKernel kernel, const KernelPlan& plan, std::size_t smem) {
  const void* entry = reinterpret_cast<const void*>(kernel);
  if (plan.cluster > 1) {
    return detail::ResidentClusters(entry, plan.block_threads, plan.cluster, smem);
  }
  return detail::ResidentBlocks(entry, plan.block_threads, smem);
}

// A persistent launch: at most one wave of units, with `smem` bytes of
// dynamic shared memory a block, each looping over its row groups.
Status LaunchPersistent(detail::ForwardKernel kernel, const KernelPlan& plan, std::size_t smem,
                        int64_t resident_units, const ForwardParams& params, cudaStream_t stream) {
  const int64_t units = std::min(params.row_groups, std::max<int64_t>(1, resident_units));
  return detail::LaunchWithPlan(kernel, plan, units * plan.cluster, smem, params, stream,
                                kEarlyLaunch);
}

// `residual`: whether the group's segments add a residual (all or none of
// a realigned group's do: SegmentLaunchKey).
Status LaunchOneGroup(DType x_dtype, DType param_dtype, const KernelPlan& plan, ForwardPath path,
                      bool residual, ForwardParams params, cudaStream_t stream) {
  params.row_groups = (params.total_rows + plan.groups - 1) / plan.groups;
  if (detail::UsesRingForward(plan, path, params.segment_count == 1,
                              params.single.residual != nullptr, detail::GetRingPolicy())) {
    // Only where blocks would loop: for fewer row groups than fit at once the
    // ring has nothing to overlap, and ForwardLeanKernel (same bits) starts
    // sooner.
    const detail::ForwardKernel ring =
        detail::FindRingForwardKernel(x_dtype, plan, param_dtype, static_cast<NormOp>(params.op));
    if (ring == nullptr) return Status(Code::kInternal, "no ring forward kernel for this plan");
    const std::size_t smem = detail::RingSharedBytes(plan.block_threads);
    const int64_t resident = ResidentUnits(ring, plan, smem);
    if (resident > 0 && params.row_groups > resident) {
      const Status launched = LaunchPersistent(ring, plan, smem, resident, params, stream);
      if (launched.ok()) detail::ring_launches.fetch_add(1, std::memory_order_relaxed);
      return launched;
    }
  }
  if (detail::UsesParamStaging(plan, path, params.segment_count == 1, x_dtype, param_dtype,
                               detail::GetParamStaging())) {
    // Launches of one wave (a small batch), where the parameters' load after the statistics
    // is on the critical path; longer ones as StagesMultiWaveLaunch says.
    const detail::ForwardKernel staged = detail::FindParamStagedForwardKernel(x_dtype, plan);
    if (staged == nullptr) return Status(Code::kInternal, "no parameter-staging forward kernel");
    // No more rows than multiprocessors: a block of each row alone spreads
    // the rows over as many multiprocessors instead of pairing them in
    // blocks (WaveRowsPlan; the row's team and thread mapping stay the
    // plan's, so do the bits).
    const KernelPlan wave =
        params.total_rows <= detail::MultiprocessorCount() ? detail::WaveRowsPlan(plan) : plan;
    ForwardParams wave_params = params;
    wave_params.shape = detail::ShapeOf(wave);
    wave_params.row_groups = (params.total_rows + wave.groups - 1) / wave.groups;
    const std::size_t smem = detail::ParamStagingBytes(wave);
    const int64_t resident = ResidentUnits(staged, wave, smem);
    if (resident > 0 && (wave_params.row_groups <= resident ||
                         detail::StagesMultiWaveLaunch(wave, static_cast<NormOp>(params.op),
                                                       detail::GetParamStaging()))) {
      const Status launched =
          detail::LaunchWithPlan(staged, wave, std::min(wave_params.row_groups, kMaxFastUnits),
                                 smem, wave_params, stream, kEarlyLaunch);
      if (launched.ok()) detail::param_staged_launches.fetch_add(1, std::memory_order_relaxed);
      return launched;
    }
  }
  const detail::ForwardKernel kernel =
      detail::FindForwardKernel(x_dtype, plan, path, param_dtype, params.segment_count == 1);
  if (kernel == nullptr) return Status(Code::kInternal, "no forward kernel for this plan");
  if (plan.layout == Layout::kStreamed) {
    return detail::LaunchWithPlan(kernel, plan, params.total_rows, 0, params, stream, kEarlyLaunch);
  }
  if (plan.layout == Layout::kStaged) {
    const std::size_t smem = detail::StagedForwardSmemBytes(plan);
    const int64_t resident = ResidentUnits(kernel, plan, smem);
    if (resident <= 0) {
      return Status(Code::kInternal, "the staged forward kernel's " + std::to_string(smem) +
                                         " bytes of shared memory a block do not fit this device");
    }
    const Status launched = LaunchPersistent(kernel, plan, smem, resident, params, stream);
    if (launched.ok()) detail::staged_launches.fetch_add(1, std::memory_order_relaxed);
    return launched;
  }
  if (path == ForwardPath::kRealign && !residual &&
      detail::GetRealignPolicy() == detail::RealignPolicy::kStaged) {
    // Persistent, its rows staged in shared memory (realign_policy.h; the
    // same bits as the realigning kernel's). Where the device cannot hold
    // a block of it (an occupancy query failed), the shifting kernel below
    // serves instead: it needs no dynamic shared memory.
    const bool single = params.segment_count == 1;
    const detail::ForwardKernel staged =
        detail::FindRealignStagedForwardKernel(x_dtype, plan, param_dtype, single);
    if (staged == nullptr) return Status(Code::kInternal, "no staged realigning kernel");
    const std::size_t smem = detail::RealignStagedSmemBytes(
        plan.groups, plan.slots * plan.row_threads, detail::kRealignForwardStages);
    if (const int64_t resident = ResidentUnits(staged, plan, smem); resident > 0) {
      const Status launched = LaunchPersistent(staged, plan, smem, resident, params, stream);
      if (launched.ok()) detail::staged_realign_launches.fetch_add(1, std::memory_order_relaxed);
      return launched;
    }
  }
  if (path != ForwardPath::kGeneral) {
    // RMSNorm's realigned rows are persistent: with a block a row group each
    // warp does one row, and the block's set-up (the schedule's division,
    // the team, the prologue) was 135 of its 850 instructions a row at bf16
    // H = 2049. Measured on an H100 (BENCHMARKS.md, round 37): bf16 +0.02 to
    // +0.04 of copy at H = 2049, 4095 and 8191; LayerNorm's rows (68 of
    // 1,166) gained under 0.01 at 2049 and lost 0.03 at bf16 4095, so they
    // keep a block a row group.
    const bool persistent =
        path == ForwardPath::kRealign && params.op == static_cast<uint8_t>(NormOp::kRmsNorm);
    const Status launched =
        persistent
            ? LaunchPersistent(kernel, plan, 0, ResidentUnits(kernel, plan, 0), params, stream)
            : detail::LaunchWithPlan(kernel, plan,
                                     std::min(params.row_groups, kMaxFastUnits) * plan.cluster, 0,
                                     params, stream, kEarlyLaunch);
    if (launched.ok() && path == ForwardPath::kRealign) {
      detail::realign_launches.fetch_add(1, std::memory_order_relaxed);
    }
    return launched;
  }
  const std::size_t smem = detail::ParamCacheBytes(
      plan.slots, plan.width, static_cast<int>(DTypeSize(param_dtype)), plan.block_threads);
  return LaunchPersistent(kernel, plan, smem, ResidentUnits(kernel, plan, smem), params, stream);
}

}  // namespace

std::size_t ForwardWorkspaceBytes(int segment_count) {
  if (segment_count <= 0) return 0;
  const std::size_t bytes = static_cast<std::size_t>(segment_count) * kTableEntryBytes;
  return (bytes + 255) / 256 * 256;
}

Status LaunchForwardSegment(const ForwardSegment& segment, cudaStream_t stream) {
  if (Status st = ValidateForwardSegment(segment); !st.ok()) return st;
  if (segment.rows == 0) return Status::Ok();
  const KernelPlan plan = detail::PlanForward(segment.hidden, segment.x_dtype);
  ForwardParams params = {};
  params.segment_count = 1;
  params.op = static_cast<uint8_t>(segment.op);
  params.shape = detail::ShapeOf(plan);
  params.total_rows = segment.rows;
  params.single = detail::ToDeviceSegment(segment, plan, 0);
  return LaunchOneGroup(segment.x_dtype, segment.param_dtype, plan,
                        detail::SegmentPath(segment, plan), segment.residual != nullptr, params,
                        stream);
}

namespace {

// The launches of one multi-segment call: one per group of segments with
// equal plans, in key order.
struct PreparedForward {
  struct Launch {
    int first_segment;  // index into the caller's segments (dtypes of the group)
    KernelPlan plan;
    ForwardPath path;
    ForwardParams params;
  };
  std::vector<Launch> launches;
  std::size_t table_bytes = 0;  // 0: no group needs the table
};

// Validates, groups segments by plan and describes each launch. The table
// of the groups with two or more segments points into `device_workspace`;
// its image is written to `host_table` when that is not null (the grouping
// is a pure function of the segments, so calls with and without a host
// table describe the same launches).
Status PrepareForward(const ForwardSegment* segments, int count, void* device_workspace,
                      std::size_t workspace_bytes, unsigned char* host_table,
                      PreparedForward* prepared) {
  if (Status st = ValidateForwardSegments(segments, count); !st.ok()) return st;

  struct Entry {
    uint64_t key;  // PlanKey packed: entries of one launch are adjacent once sorted
    int index;
    KernelPlan plan;
    ForwardPath path;  // part of the key
  };
  std::vector<Entry> entries;
  entries.reserve(count);
  for (int i = 0; i < count; ++i) {
    if (segments[i].rows == 0) continue;
    const KernelPlan plan = detail::PlanForward(segments[i].hidden, segments[i].x_dtype);
    const ForwardPath path = detail::SegmentPath(segments[i], plan);
    entries.push_back({detail::SegmentLaunchKey(segments[i], plan, path), i, plan, path});
  }
  prepared->launches.clear();
  prepared->table_bytes = 0;
  if (entries.empty()) return Status::Ok();
  // A batch of one configuration (the common case) is already in order.
  auto by_key = [](const Entry& a, const Entry& b) { return a.key < b.key; };
  if (!std::is_sorted(entries.begin(), entries.end(), by_key)) {
    std::stable_sort(entries.begin(), entries.end(), by_key);
  }

  // Groups of equal plans: [start, end) ranges of `entries`.
  std::vector<std::pair<std::size_t, std::size_t>> groups;
  bool needs_table = false;
  for (std::size_t start = 0; start < entries.size();) {
    std::size_t end = start + 1;
    while (end < entries.size() && entries[end].key == entries[start].key) ++end;
    needs_table = needs_table || end - start > 1;
    groups.emplace_back(start, end);
    start = end;
  }

  const std::size_t n = entries.size();
  if (needs_table &&
      (device_workspace == nullptr || workspace_bytes < ForwardWorkspaceBytes(count))) {
    return detail::InvalidArgument(
        "a multi-segment launch needs a device workspace of ForwardWorkspaceBytes(" +
        std::to_string(count) + ") = " + std::to_string(ForwardWorkspaceBytes(count)) +
        " bytes, got " + std::to_string(device_workspace ? workspace_bytes : 0));
  }
  // The kernels read the table's 8-byte fields in place: misaligned, they fault (sticky).
  if (needs_table && reinterpret_cast<std::uintptr_t>(device_workspace) % 16 != 0) {
    return detail::InvalidArgument(
        "a multi-segment launch's device workspace must be 16-byte aligned (cudaMalloc's "
        "allocations are)");
  }
  if (needs_table) prepared->table_bytes = n * kTableEntryBytes;

  const std::size_t first_rows_offset = n * sizeof(DeviceSegment);
  const std::size_t buckets_offset = first_rows_offset + n * sizeof(int64_t);
  auto* table_rows = reinterpret_cast<DeviceSegment*>(host_table);
  auto* first_rows =
      host_table ? reinterpret_cast<int64_t*>(host_table + first_rows_offset) : nullptr;
  auto* buckets =
      host_table ? reinterpret_cast<detail::SegmentBucket*>(host_table + buckets_offset) : nullptr;
  auto* device_base = static_cast<unsigned char*>(device_workspace);
  auto* device_rows = reinterpret_cast<DeviceSegment*>(device_base);
  auto* device_first_rows = reinterpret_cast<int64_t*>(device_base + first_rows_offset);
  auto* device_buckets = reinterpret_cast<detail::SegmentBucket*>(device_base + buckets_offset);
  prepared->launches.reserve(groups.size());
  for (const auto& [start, end] : groups) {
    ForwardParams params = {};
    const KernelPlan& plan = entries[start].plan;
    params.shape = detail::ShapeOf(plan);
    params.op = static_cast<uint8_t>(segments[entries[start].index].op);
    params.segment_count = static_cast<int32_t>(end - start);
    int64_t rows = 0;
    // The rows every segment of the group has, -1 once two differ.
    int64_t equal_rows = segments[entries[start].index].rows;
    for (std::size_t e = start; e < end; ++e) {
      const ForwardSegment& s = segments[entries[e].index];
      if (s.rows != equal_rows) equal_rows = -1;
      const DeviceSegment d = detail::ToDeviceSegment(s, plan, rows);
      if (end - start == 1) {
        params.single = d;
      } else if (host_table != nullptr) {
        std::memcpy(&table_rows[e], &d, sizeof(d));
        std::memcpy(&first_rows[e], &rows, sizeof(rows));
      }
      rows += s.rows;
    }
    params.total_rows = rows;
    if (end - start > 1) {
      const int segments_in_group = static_cast<int>(end - start);
      params.table = device_rows + start;
      params.first_rows = device_first_rows + start;
      params.buckets = device_buckets + start;
      params.bucket_shift = detail::SegmentBucketShift(rows, segments_in_group);
      params.buckets_identity =
          detail::SegmentBucketsAreIdentity(equal_rows, params.bucket_shift) ? 1 : 0;
      if (host_table != nullptr) {
        detail::FillSegmentBuckets(first_rows + start, segments_in_group, rows, params.bucket_shift,
                                   buckets + start);
      }
    }
    prepared->launches.push_back(
        {entries[start].index, entries[start].plan, entries[start].path, params});
  }
  return Status::Ok();
}

// The device address of pinned host memory that holds a table image, or null
// when `host` is null, not pinned (then the table is copied instead) or not
// 16-byte aligned (the kernels read the image with 8-byte loads). The query
// sets no error on ordinary memory: it reports it unregistered.
const void* MappedPinnedPointer(const void* host) {
  if (host == nullptr || !detail::IsAligned16(host)) return nullptr;
  cudaPointerAttributes attributes = {};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) {
    cudaGetLastError();  // clears the query's own error (older drivers report one)
    return nullptr;
  }
  return attributes.type == cudaMemoryTypeHost ? attributes.devicePointer : nullptr;
}

// Whether kernels read a table in pinned staging in place, not from a copy:
// when the segments of the launches that read it average two rows or fewer.
// A block reads its segments' entries over the bus: once a one-row segment,
// less than a copy and its hand-off (BENCHMARKS.md, round 9); every block of
// a long one (64 x 128 x 2049 bf16: 44-114 us over an uploaded table).
bool TableReadInPlacePays(const PreparedForward& prepared) {
  int64_t rows = 0;
  int64_t segments = 0;
  for (const PreparedForward::Launch& launch : prepared.launches) {
    if (launch.params.segment_count < 2) continue;
    rows += launch.params.total_rows;
    segments += launch.params.segment_count;
  }
  return rows <= int64_t{2} * segments;
}

// Points the launches' table pointers, laid out from `from`, at the same
// image laid out from `to`.
void RebaseTable(const void* from, const void* to, PreparedForward* prepared) {
  const auto shift = [&](auto* p) {
    using Pointer = decltype(p);
    return p == nullptr ? p
                        : reinterpret_cast<Pointer>(reinterpret_cast<const unsigned char*>(to) +
                                                    (reinterpret_cast<const unsigned char*>(p) -
                                                     reinterpret_cast<const unsigned char*>(from)));
  };
  for (PreparedForward::Launch& launch : prepared->launches) {
    launch.params.table = shift(launch.params.table);
    launch.params.first_rows = shift(launch.params.first_rows);
    launch.params.buckets = shift(launch.params.buckets);
  }
}

Status EnqueueForward(const ForwardSegment* segments, const PreparedForward& prepared,
                      cudaStream_t stream) {
  for (const PreparedForward::Launch& launch : prepared.launches) {
    const ForwardSegment& first = segments[launch.first_segment];
    if (Status st = LaunchOneGroup(first.x_dtype, first.param_dtype, launch.plan, launch.path,
                                   first.residual != nullptr, launch.params, stream);
        !st.ok()) {
      return st;
    }
  }
  return Status::Ok();
}

}  // namespace

Status LaunchForward(const ForwardSegment* segments, int count, void* device_workspace,
                     std::size_t workspace_bytes, void* host_staging, cudaStream_t stream) {
  // The table image goes to the caller's pinned staging, else to pageable
  // memory (then the upload is synchronous with the host).
  std::vector<unsigned char> pageable;
  unsigned char* table_host = static_cast<unsigned char*>(host_staging);
  if (table_host == nullptr && count > 1) {
    pageable.resize(static_cast<std::size_t>(count) * kTableEntryBytes);
    table_host = pageable.data();
  }
  PreparedForward prepared;
  if (Status st =
          PrepareForward(segments, count, device_workspace, workspace_bytes, table_host, &prepared);
      !st.ok()) {
    return st;
  }
  if (prepared.table_bytes > 0) {
    // Pinned staging is mapped: short segments' kernels read it in place.
    const void* mapped =
        TableReadInPlacePays(prepared) ? MappedPinnedPointer(host_staging) : nullptr;
    if (mapped != nullptr) {
      RebaseTable(device_workspace, mapped, &prepared);
    } else {
      if (Status st =
              detail::FromCuda("segment table upload",
                               cudaMemcpyAsync(device_workspace, table_host, prepared.table_bytes,
                                               cudaMemcpyHostToDevice, stream));
          !st.ok()) {
        return st;
      }
    }
  }
  return EnqueueForward(segments, prepared, stream);
}

Status WriteForwardTable(const ForwardSegment* segments, int count, void* device_workspace,
                         std::size_t workspace_bytes, void* host_table, std::size_t* table_bytes) {
  if (host_table == nullptr || table_bytes == nullptr) {
    return detail::InvalidArgument("host_table and table_bytes must not be null");
  }
  *table_bytes = 0;
  PreparedForward prepared;
  if (Status st = PrepareForward(segments, count, device_workspace, workspace_bytes,
                                 static_cast<unsigned char*>(host_table), &prepared);
      !st.ok()) {
    return st;
  }
  *table_bytes = prepared.table_bytes;
  return Status::Ok();
}

Status LaunchForwardWithUploadedTable(const ForwardSegment* segments, int count,
                                      void* device_workspace, std::size_t workspace_bytes,
                                      cudaStream_t stream) {
  PreparedForward prepared;
  if (Status st =
          PrepareForward(segments, count, device_workspace, workspace_bytes, nullptr, &prepared);
      !st.ok()) {
    return st;
  }
  return EnqueueForward(segments, prepared, stream);
}

}  // namespace normsvc::kernels
