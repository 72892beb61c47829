// The GPU launchers refuse what the shared validation refuses (types.h;
// argument_validation_test.cc goes through it case by case), before any CUDA
// call: these first tests run without a GPU, on pointers that are never
// dereferenced. Then, on a device: a multi-segment launch's workspace off a
// 16-byte boundary is refused and nothing runs, and a backward of no rows
// writes zeros to dgamma and dbeta.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_support.h"
#include "normsvc/kernels/gpu.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::kernels {
namespace {

using testing::DeviceBuffer;
using testing::HostTensor;

// Addresses that are never dereferenced: every call below fails validation
// (or, on a GPU, runs on real buffers).
void* FakeDevicePointer(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

ForwardSegment FakeSegment(int64_t rows, int64_t hidden) {
  ForwardSegment s;
  s.rows = rows;
  s.hidden = hidden;
  s.x = FakeDevicePointer(0x10000);
  s.out = FakeDevicePointer(0x20000);
  s.x_row_stride = s.out_row_stride = hidden;
  return s;
}

TEST(LaunchValidation, ExtentsPastTheBoundAreRefusedBeforeAnyCudaCall) {
  ForwardSegment bad = FakeSegment(3, 64);
  bad.x_row_stride = (int64_t{1} << 62) + 1;
  const Status single = LaunchForwardSegment(bad, nullptr);
  EXPECT_EQ(single.code(), Code::kInvalidArgument);
  EXPECT_EQ(single.message(), ValidateForwardSegment(bad).message());
  EXPECT_NE(single.message().find("span more than"), std::string::npos) << single.message();

  const ForwardSegment segments[2] = {FakeSegment(2, 64), bad};
  const Status many = LaunchForward(segments, 2, FakeDevicePointer(0x30000),
                                    ForwardWorkspaceBytes(2), nullptr, nullptr);
  EXPECT_EQ(many.code(), Code::kInvalidArgument);
  EXPECT_EQ(many.message().rfind("segment 1: x: 3 rows of stride", 0), 0u) << many.message();

  BackwardArgs a;
  a.rows = int64_t{1} << 61;
  a.hidden = 64;
  a.x = a.dy = FakeDevicePointer(0x10000);
  a.dx = FakeDevicePointer(0x20000);
  a.x_row_stride = a.dy_row_stride = a.dx_row_stride = 64;
  const Status backward = LaunchBackward(a, nullptr, 0, nullptr);
  EXPECT_EQ(backward.code(), Code::kInvalidArgument);
  EXPECT_EQ(backward.message().rfind("x: 2305843009213693952 rows of stride 64", 0), 0u)
      << backward.message();
}

// Two segments of one plan need the table; a workspace 4 bytes off a 16-byte
// boundary is refused by each entry point that takes one (the check comes
// before any CUDA call, so this runs without a GPU too).
TEST(LaunchValidation, MisalignedTableWorkspaceIsRefused) {
  const ForwardSegment segments[2] = {FakeSegment(2, 64), FakeSegment(5, 64)};
  const std::size_t bytes = ForwardWorkspaceBytes(2) + 16;
  void* misaligned = FakeDevicePointer(0x30004);
  std::vector<unsigned char> host_table(bytes);
  std::size_t table_bytes = 1;
  const Status launched = LaunchForward(segments, 2, misaligned, bytes, nullptr, nullptr);
  const Status written =
      WriteForwardTable(segments, 2, misaligned, bytes, host_table.data(), &table_bytes);
  const Status uploaded = LaunchForwardWithUploadedTable(segments, 2, misaligned, bytes, nullptr);
  for (const Status& st : {launched, written, uploaded}) {
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("workspace must be 16-byte aligned"), std::string::npos)
        << st.message();
  }
  EXPECT_EQ(table_bytes, 0u);
  // One segment needs no table, so no workspace either.
  EXPECT_TRUE(
      WriteForwardTable(segments, 1, misaligned, bytes, host_table.data(), &table_bytes).ok());
}

// On a device: the refused launch writes nothing; the same launch with the
// workspace on its boundary runs and matches the reference.
TEST(LaunchValidation, MisalignedTableWorkspaceRunsNothingOnTheDevice) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = testing::SeededRng("misaligned table workspace");
  constexpr int64_t kHidden = 256;
  const int64_t rows[2] = {3, 4};
  HostTensor x[2] = {HostTensor(DType::kF32, rows[0], kHidden, kHidden),
                     HostTensor(DType::kF32, rows[1], kHidden, kHidden)};
  DeviceBuffer dx[2], dout[2];
  ForwardSegment segments[2];
  for (int i = 0; i < 2; ++i) {
    x[i].FillNormal(rng, 0.3, 1.7);
    dx[i] = x[i].ToDevice();
    dout[i] = DeviceBuffer(x[i].bytes.size());  // poisoned
    segments[i] = FakeSegment(rows[i], kHidden);
    segments[i].x = dx[i].get();
    segments[i].out = dout[i].get();
  }
  const DeviceBuffer workspace(ForwardWorkspaceBytes(2) + 16);
  auto* base = static_cast<unsigned char*>(workspace.get());
  // Refused on the host first (WriteForwardTable launches nothing): were the
  // check gone, the launch below would fault, a sticky error that would fail
  // every later test of the process.
  std::vector<unsigned char> host_table(ForwardWorkspaceBytes(2));
  std::size_t table_bytes = 0;
  ASSERT_EQ(WriteForwardTable(segments, 2, base + 4, ForwardWorkspaceBytes(2), host_table.data(),
                              &table_bytes)
                .code(),
            Code::kInvalidArgument);
  const Status refused =
      LaunchForward(segments, 2, base + 4, ForwardWorkspaceBytes(2), nullptr, nullptr);
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  for (int i = 0; i < 2; ++i) {
    for (uint8_t byte : dout[i].Download()) ASSERT_EQ(byte, 0x7f) << "segment " << i;
  }

  const Status run =
      LaunchForward(segments, 2, base + 16, ForwardWorkspaceBytes(2), nullptr, nullptr);
  ASSERT_TRUE(run.ok()) << run.message();
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
  for (int i = 0; i < 2; ++i) {
    const HostTensor got = testing::FromDevice(dout[i], DType::kF32, rows[i], kHidden, kHidden);
    for (int64_t r = 0; r < rows[i]; ++r) {
      const std::vector<double> row = x[i].Row(r);
      const RowResult ref = ReferenceForwardRow(NormOp::kLayerNorm, row.data(), nullptr, nullptr,
                                                nullptr, kHidden, 1e-5f);
      double scale = 1.0;
      for (double v : ref.y) scale = std::max(scale, std::abs(v));
      for (int64_t c = 0; c < kHidden; ++c) {
        double ratio = 0;
        std::string why;
        ASSERT_TRUE(
            testing::WithinTolerance(DType::kF32, got.At(r, c), ref.y[c], scale, &ratio, &why))
            << "segment " << i << " row " << r << " column " << c << ": " << why;
      }
    }
  }
}

// A sum over no rows: dgamma and dbeta (poisoned) become zeros; with a
// workspace or without (none is needed then).
TEST(LaunchValidation, BackwardOfNoRowsWritesZeroSums) {
  NORMSVC_REQUIRE_GPU();
  constexpr int64_t kHidden = 300;
  for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
    SCOPED_TRACE(NormOpName(op));
    const DeviceBuffer dgamma(kHidden * sizeof(float)), dbeta(kHidden * sizeof(float));
    BackwardArgs a;
    a.op = op;
    a.rows = 0;
    a.hidden = kHidden;
    a.dgamma = static_cast<float*>(dgamma.get());
    a.dbeta = op == NormOp::kLayerNorm ? static_cast<float*>(dbeta.get()) : nullptr;
    const Status st = LaunchBackward(a, nullptr, 0, nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    for (uint8_t byte : dgamma.Download()) ASSERT_EQ(byte, 0);
    for (uint8_t byte : dbeta.Download()) ASSERT_EQ(byte, op == NormOp::kLayerNorm ? 0 : 0x7f);
  }
}

}  // namespace
}  // namespace normsvc::kernels
