// Forward on special rows (near-constant, zero variance, large mean with a
// small spread, the same with a step between parts of the row or with the
// first warp's elements far off, tiny fp16 values, NaN/Inf), batch invariance of a row's bits
// under multi-segment launches, and the launchers' argument checks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "kernel_params.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"
#include "segment_index.h"

namespace normsvc::kernels::testing {
namespace {

// Row kinds written over the random rows of a case.
enum class RowKind {
  kNearConstant,
  kZeroVariance,
  kLargeMean,
  kSteppedLargeMean,
  kFirstWarpOffset,
  kTiny,
  kNaN,
  kInf,
  kRandom
};

// Whether column c of a row laid out as `plan` says lies in the row's first
// warp (threads 0-31 own chunks k * row_threads + lane).
bool InFirstWarp(const detail::KernelPlan& plan, int64_t c) {
  const int64_t chunk = c / plan.width;
  return chunk % plan.row_threads < 32;
}

// `p` advanced by `elements` elements of `dtype` (null stays null).
template <typename T>
T* AdvanceElements(T* p, int64_t elements, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
  if (p == nullptr) return p;
  return static_cast<Byte*>(p) + elements * static_cast<int64_t>(DTypeSize(dtype));
}

// Row r of `segment` as a one-row segment of its own.
ForwardSegment RowOf(ForwardSegment segment, int64_t r) {
  segment.x = AdvanceElements(segment.x, r * segment.x_row_stride, segment.x_dtype);
  segment.residual =
      AdvanceElements(segment.residual, r * segment.residual_row_stride, segment.x_dtype);
  segment.residual_out =
      AdvanceElements(segment.residual_out, r * segment.residual_out_row_stride, segment.x_dtype);
  segment.out = AdvanceElements(segment.out, r * segment.out_row_stride, segment.out_dtype);
  if (segment.mean != nullptr) segment.mean += r;
  if (segment.rstd != nullptr) segment.rstd += r;
  segment.rows = 1;
  return segment;
}

// Which way LaunchForward took the table of `segments` from pinned staging,
// with `workspace` poisoned with 0xA5 before the launch: after a copy
// (`copied`) the workspace starts with the table image (WriteForwardTable's
// for the same segments and workspace); after an in-place read it is
// untouched.
void ExpectTableWent(const std::vector<ForwardSegment>& segments, const DeviceBuffer& workspace,
                     bool copied) {
  std::vector<uint8_t> image(workspace.bytes());
  std::size_t table_bytes = 0;
  const Status written =
      WriteForwardTable(segments.data(), static_cast<int>(segments.size()), workspace.get(),
                        workspace.bytes(), image.data(), &table_bytes);
  ASSERT_TRUE(written.ok()) << written.message();
  ASSERT_GT(table_bytes, 0u) << "no table: nothing to check";
  const std::vector<uint8_t> held = workspace.Download();
  if (copied) {
    EXPECT_TRUE(std::equal(image.begin(), image.begin() + table_bytes, held.begin()))
        << "the table was not copied to the workspace";
  } else {
    EXPECT_TRUE(std::all_of(held.begin(), held.end(), [](uint8_t b) { return b == 0xA5; }))
        << "the table was not read in place: the workspace was written";
  }
}

void WriteRow(HostTensor& t, int64_t r, RowKind kind, const detail::KernelPlan& plan,
              std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  // A large mean with a small spread that the dtype still resolves (bf16 and
  // fp16 round 1e4 + 1e-2 to a constant).
  const bool wide = t.dtype == DType::kF32;
  const double large_mean = wide ? 1e4 : 64.0;
  const double small_spread = wide ? 1e-2 : 0.5;
  for (int64_t c = 0; c < t.cols; ++c) {
    double value = 0.3 + 1.7 * normal(rng);
    switch (kind) {
      case RowKind::kNearConstant:
        value = 0.75 + 1e-6 * normal(rng);
        break;
      case RowKind::kZeroVariance:
        value = 0.7;
        break;
      case RowKind::kLargeMean:
        value = large_mean + small_spread * normal(rng);
        break;
      case RowKind::kSteppedLargeMean:
        // A quarter of each 1024 columns sits 3 spreads higher: the parts of
        // the row that different warps hold have different means.
        value = large_mean + small_spread * (normal(rng) + (c % 1024 < 256 ? 3.0 : 0.0));
        break;
      case RowKind::kFirstWarpOffset:
        // Only the first warp's elements are offset, by 100 spreads: the
        // warps' means differ by far more than their spread (the merged
        // statistic of rows that span a cluster must not take one warp's
        // mean for the row's).
        value = large_mean + small_spread * (normal(rng) + (InFirstWarp(plan, c) ? 100.0 : 0.0));
        break;
      case RowKind::kTiny:
        value = 1e-4 * normal(rng);
        break;
      case RowKind::kNaN:
        if (c == t.cols / 2) value = NAN;
        break;
      case RowKind::kInf:
        if (c == t.cols / 3) value = -INFINITY;
        break;
      case RowKind::kRandom:
        break;
    }
    t.Set(r, c, value);
  }
}

TEST(ForwardSpecialRows, MatchReferenceIncludingNaNAndInf) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("special rows");
  const RowKind kinds[] = {RowKind::kNearConstant,
                           RowKind::kZeroVariance,
                           RowKind::kLargeMean,
                           RowKind::kSteppedLargeMean,
                           RowKind::kFirstWarpOffset,
                           RowKind::kTiny,
                           RowKind::kNaN,
                           RowKind::kInf,
                           RowKind::kRandom};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      // 2049 and 8191: a partial last chunk (the realigning kernel, but for
      // fp32 8191, whose 2,048 chunks are past its reach: strided); 12289:
      // rows that span a cluster, strided (a partial chunk past the
      // realigning kernel's reach); 32768: a register cluster of two blocks
      // (16-bit); 65536 and 262144: staged in a cluster's shared memory.
      for (int64_t hidden : {64, 768, 2049, 4096, 8191, 12289, 32768, 65536, 262144}) {
        ForwardSpec spec;
        spec.op = op;
        spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
        spec.rows = std::size(kinds);
        spec.hidden = hidden;
        spec.stats = true;
        ForwardCase c(spec, rng);
        const detail::KernelPlan plan = detail::PlanForward(hidden, dtype);
        for (int64_t r = 0; r < spec.rows; ++r) WriteRow(c.x(), r, kinds[r], plan, rng);
        c.Upload();
        // A finite poison: an unwritten element of a NaN row would pass a NaN poison.
        c.PoisonOutputs(0x3c);
        ASSERT_TRUE(LaunchForwardSegment(c.Segment(), nullptr).ok());
        CUDA_ASSERT_OK(cudaDeviceSynchronize());
        const double ratio = c.Check("special rows");
        std::printf("[ special  ] %-60s max err/tol %.3f\n", Describe(spec).c_str(), ratio);
      }
    }
  }
}

// A row's bits do not depend on what else is in the launch: each tensor
// alone, then all of them in one mixed launch (several H and dtypes, aligned
// and misaligned copies, whole tensors and one-row segments), bit for bit.
TEST(ForwardBatchInvariance, MixedLaunchMatchesEachTensorAlone) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("batch invariance");
  std::vector<std::unique_ptr<ForwardCase>> cases;
  // 16384 (fp32) and 32768 (bf16): register clusters of two blocks; 65536:
  // staged in clusters of two (bf16) and four (fp32).
  for (int64_t hidden : {5, 64, 768, 2049, 4096, 8192, 12289, 16384, 32768, 65536}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      ForwardSpec spec;
      spec.op = hidden % 2 ? NormOp::kRmsNorm : NormOp::kLayerNorm;
      spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
      spec.rows = hidden >= 16384 ? 4 : 37;
      spec.hidden = hidden;
      spec.residual = spec.residual_out = spec.stats = true;
      AddAlignedAndMisalignedPair(spec, rng, cases);
    }
  }
  std::vector<std::vector<uint8_t>> alone;
  for (auto& c : cases) alone.push_back(RunAlone(*c));
  // Aligned and misaligned copies of the same rows agree.
  for (std::size_t i = 1; i < cases.size(); i += 2) {
    EXPECT_EQ(alone[i - 1], alone[i]) << "misaligned copy differs: " << Describe(cases[i]->spec());
  }

  // One launch: every tensor whole, interleaved with single-row segments of
  // the first rows of a few tensors pointing at the same buffers (they write
  // the same values to the same places).
  std::vector<ForwardSegment> segments;
  for (auto& c : cases) {
    c->PoisonOutputs();
    segments.push_back(c->Segment());
    ForwardSegment one = c->Segment();
    one.rows = 1;
    segments.push_back(one);
  }
  DeviceBuffer workspace(ForwardWorkspaceBytes(static_cast<int>(segments.size())));
  ASSERT_TRUE(LaunchForward(segments.data(), static_cast<int>(segments.size()), workspace.get(),
                            workspace.bytes(), nullptr, nullptr)
                  .ok());
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i]->OutputBytes(), alone[i]) << Describe(cases[i]->spec());
    cases[i]->Check("mixed launch");
  }

  // The same launch in two steps: the caller uploads the table image.
  for (auto& c : cases) c->PoisonOutputs();
  std::vector<unsigned char> table(workspace.bytes(), 0xA5);
  std::size_t table_bytes = 0;
  ASSERT_TRUE(WriteForwardTable(segments.data(), static_cast<int>(segments.size()), workspace.get(),
                                workspace.bytes(), table.data(), &table_bytes)
                  .ok());
  ASSERT_GT(table_bytes, 0u);
  ASSERT_LE(table_bytes, workspace.bytes());
  CUDA_ASSERT_OK(cudaMemcpy(workspace.get(), table.data(), table_bytes, cudaMemcpyHostToDevice));
  ASSERT_TRUE(LaunchForwardWithUploadedTable(segments.data(), static_cast<int>(segments.size()),
                                             workspace.get(), workspace.bytes(), nullptr)
                  .ok());
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i]->OutputBytes(), alone[i]) << "two-step " << Describe(cases[i]->spec());
  }

  // With pinned staging the kernels read a table in place only for segments
  // of one or two rows on average: every row of every tensor as a one-row
  // segment, plus a tensor of a plan no other segment has (a launch without
  // a table among the launches that read it); the workspace is poisoned, so
  // a kernel that read it instead of the staging would fail.
  for (auto& c : cases) c->PoisonOutputs();
  std::vector<ForwardSegment> row_segments;
  for (auto& c : cases) {
    for (int64_t r = 0; r < c->spec().rows; ++r) row_segments.push_back(RowOf(c->Segment(), r));
  }
  ForwardSpec lone;
  lone.x_dtype = lone.out_dtype = lone.param_dtype = DType::kF16;
  lone.rows = 5;
  lone.hidden = 24;
  ForwardCase lone_case(lone, rng);
  lone_case.Upload();
  const std::vector<uint8_t> lone_alone = RunAlone(lone_case);
  lone_case.PoisonOutputs();
  std::vector<ForwardSegment> with_lone = row_segments;
  with_lone.insert(with_lone.begin() + 3, lone_case.Segment());
  DeviceBuffer pinned_workspace(ForwardWorkspaceBytes(static_cast<int>(with_lone.size())));
  CUDA_ASSERT_OK(cudaMemset(pinned_workspace.get(), 0xA5, pinned_workspace.bytes()));
  void* staging = nullptr;
  CUDA_ASSERT_OK(cudaMallocHost(&staging, pinned_workspace.bytes()));
  const Status in_place =
      LaunchForward(with_lone.data(), static_cast<int>(with_lone.size()), pinned_workspace.get(),
                    pinned_workspace.bytes(), staging, nullptr);
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  CUDA_ASSERT_OK(cudaFreeHost(staging));
  ASSERT_TRUE(in_place.ok()) << in_place.message();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i]->OutputBytes(), alone[i]) << "in place " << Describe(cases[i]->spec());
  }
  EXPECT_EQ(lone_case.OutputBytes(), lone_alone) << "in place, lone plan";
  ExpectTableWent(with_lone, pinned_workspace, /*copied=*/false);

  // The whole tensors with pinned staging: their table is copied to the
  // workspace on the stream (poisoned first). The staging starts zeroed, as
  // ExpectTableWent's image does, so that bytes the table leaves unwritten
  // (padding) compare equal.
  for (auto& c : cases) c->PoisonOutputs();
  CUDA_ASSERT_OK(cudaMemset(pinned_workspace.get(), 0xA5, pinned_workspace.bytes()));
  CUDA_ASSERT_OK(cudaMallocHost(&staging, pinned_workspace.bytes()));
  std::memset(staging, 0, pinned_workspace.bytes());
  const Status copied =
      LaunchForward(segments.data(), static_cast<int>(segments.size()), pinned_workspace.get(),
                    pinned_workspace.bytes(), staging, nullptr);
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  CUDA_ASSERT_OK(cudaFreeHost(staging));
  ASSERT_TRUE(copied.ok()) << copied.message();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i]->OutputBytes(), alone[i]) << "copied " << Describe(cases[i]->spec());
  }
  ExpectTableWent(segments, pinned_workspace, /*copied=*/true);
}

// 1,000 one-row segments of H = 4096 in one launch give the bits of one
// 1000 x 4096 tensor.
TEST(ForwardBatchInvariance, ThousandOneRowSegmentsMatchOneTensor) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("one-row segments");
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    ForwardSpec spec;
    spec.x_dtype = spec.out_dtype = spec.param_dtype = dtype;
    spec.rows = 1000;
    spec.hidden = 4096;
    spec.stats = true;
    ForwardCase c(spec, rng);
    c.Upload();
    const std::vector<uint8_t> whole = RunAlone(c);
    c.Check("whole tensor");
    const ForwardSegment base = c.Segment();
    std::vector<ForwardSegment> segments(1000, base);
    const std::size_t out_row_bytes = base.out_row_stride * DTypeSize(base.out_dtype);
    for (int r = 0; r < 1000; ++r) {
      ForwardSegment& s = segments[r];
      s.rows = 1;
      s.x = static_cast<const char*>(base.x) + r * base.x_row_stride * DTypeSize(dtype);
      s.out = static_cast<char*>(base.out) + r * out_row_bytes;
      s.mean = base.mean + r;
      s.rstd = base.rstd + r;
    }
    DeviceBuffer workspace(ForwardWorkspaceBytes(1000));
    void* staging = nullptr;  // pinned, as the contract asks
    CUDA_ASSERT_OK(cudaMallocHost(&staging, ForwardWorkspaceBytes(1000)));
    c.PoisonOutputs();
    const Status st =
        LaunchForward(segments.data(), 1000, workspace.get(), workspace.bytes(), staging, nullptr);
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    CUDA_ASSERT_OK(cudaFreeHost(staging));
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(c.OutputBytes(), whole) << DTypeName(dtype);
  }
}

// The table image WriteForwardTable writes (DeviceSegment entries, their
// first rows, the row -> segment index; kernels/src/forward_launch.cu): in
// every plan group, the index finds for each row the entry of the segment
// that holds it. Host only: runs without a GPU too (in every build with the
// CUDA kernels, CI's first stage among them).
TEST(ForwardTable, IndexFindsEveryRowOfEveryGroup) {
  std::mt19937_64 rng = SeededRng("forward table");
  std::vector<ForwardSegment> segments;
  std::map<uintptr_t, int64_t> rows_of;  // by x pointer (unique per segment)
  for (int i = 0; i < 700; ++i) {
    ForwardSegment s;
    s.hidden = i % 3 == 0 ? 1024 : 4096;  // two plans, interleaved
    s.x_dtype = s.out_dtype = s.param_dtype = DType::kBF16;
    s.rows = i % 50 == 7 ? 5000 : 1 + static_cast<int64_t>(rng() % 20);
    s.x_row_stride = s.out_row_stride = s.hidden;
    s.x = reinterpret_cast<const void*>(uintptr_t{1} << 32 | static_cast<uintptr_t>(i) << 12);
    s.out = reinterpret_cast<void*>(uintptr_t{1} << 40 | static_cast<uintptr_t>(i) << 12);
    rows_of[reinterpret_cast<uintptr_t>(s.x)] = s.rows;
    segments.push_back(s);
  }
  const int n = static_cast<int>(segments.size());
  const std::size_t workspace_bytes = ForwardWorkspaceBytes(n);
  std::vector<unsigned char> image(workspace_bytes, 0xA5);
  std::size_t table_bytes = 0;
  ASSERT_TRUE(WriteForwardTable(segments.data(), n, reinterpret_cast<void*>(uintptr_t{1} << 44),
                                workspace_bytes, image.data(), &table_bytes)
                  .ok());
  ASSERT_GT(table_bytes, 0u);
  ASSERT_LE(table_bytes, workspace_bytes);
  std::vector<detail::DeviceSegment> entries(n);
  std::vector<int64_t> first_rows(n);
  std::vector<detail::SegmentBucket> buckets(n);
  std::memcpy(entries.data(), image.data(), n * sizeof(detail::DeviceSegment));
  std::memcpy(first_rows.data(), image.data() + n * sizeof(detail::DeviceSegment),
              n * sizeof(int64_t));
  std::memcpy(buckets.data(), image.data() + n * (sizeof(detail::DeviceSegment) + sizeof(int64_t)),
              n * sizeof(detail::SegmentBucket));
  // Groups: maximal runs of entries with one hidden size, rows counted from 0.
  int groups = 0;
  for (int start = 0; start < n;) {
    int end = start + 1;
    while (end < n && entries[end].hidden == entries[start].hidden) ++end;
    ++groups;
    int64_t rows = 0;
    for (int e = start; e < end; ++e) {
      ASSERT_EQ(first_rows[e], rows) << "entry " << e;
      ASSERT_EQ(entries[e].first_row, rows) << "entry " << e;
      rows += rows_of.at(reinterpret_cast<uintptr_t>(entries[e].x));
    }
    const int shift = detail::SegmentBucketShift(rows, end - start);
    for (int e = start; e < end; ++e) {
      const int64_t last = first_rows[e] + rows_of.at(reinterpret_cast<uintptr_t>(entries[e].x));
      for (int64_t row = first_rows[e]; row < last; ++row) {
        ASSERT_EQ(
            detail::FindSegment(first_rows.data() + start, buckets.data() + start, shift, row) +
                start,
            e)
            << "row " << row << " of group " << groups;
      }
    }
    start = end;
  }
  EXPECT_EQ(groups, 2);
}

// Argument checks happen before any CUDA call: these run without a GPU too.
TEST(ForwardArguments, RejectsBadEpsilonAndSmallWorkspace) {
  ForwardSegment s;
  s.rows = 2;
  s.hidden = 8;
  s.x = reinterpret_cast<const void*>(0x1000);
  s.out = reinterpret_cast<void*>(0x2000);
  s.x_row_stride = s.out_row_stride = 8;
  for (float eps : {0.0f, -1e-5f, NAN, INFINITY}) {
    s.epsilon = eps;
    EXPECT_EQ(LaunchForwardSegment(s, nullptr).code(), Code::kInvalidArgument) << eps;
    EXPECT_EQ(LaunchForward(&s, 1, nullptr, 0, nullptr, nullptr).code(), Code::kInvalidArgument);
  }
  s.epsilon = 1e-5f;
  const ForwardSegment two[2] = {s, s};
  const Status st = LaunchForward(two, 2, nullptr, 0, nullptr, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("ForwardWorkspaceBytes"), std::string::npos) << st.message();
  s.hidden = kMaxHidden + 1;
  s.x_row_stride = s.out_row_stride = s.hidden;
  EXPECT_EQ(LaunchForwardSegment(s, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(LaunchForward(nullptr, 1, nullptr, 0, nullptr, nullptr).code(), Code::kInvalidArgument);
  // The two-step form checks the same, and needs somewhere to write.
  s.hidden = 8;
  s.x_row_stride = s.out_row_stride = 8;
  std::size_t table_bytes = 1;
  unsigned char table[1024];
  EXPECT_EQ(WriteForwardTable(two, 2, nullptr, 0, table, &table_bytes).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(WriteForwardTable(two, 2, reinterpret_cast<void*>(0x3000), ForwardWorkspaceBytes(2),
                              nullptr, &table_bytes)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LaunchForwardWithUploadedTable(two, 2, nullptr, 0, nullptr).code(),
            Code::kInvalidArgument);
  // One segment needs no table.
  ASSERT_TRUE(WriteForwardTable(&s, 1, nullptr, 0, table, &table_bytes).ok());
  EXPECT_EQ(table_bytes, 0u);
}

}  // namespace
}  // namespace normsvc::kernels::testing
