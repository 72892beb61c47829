// The backward's bits do not depend on alignment where H is a multiple of
// the vector width (rows of other H may take BackwardRealignKernel, whose
// bits follow each row's offset: launch_plan.h): the same rows, 16-byte
// aligned (x and dy staged through shared memory by asynchronous copies) and
// one element off (the same kernel filling its ring with element loads), give
// identical dx, dgamma and dbeta, with enough rows that every unit's ring
// wraps several times. The two runs poison their outputs differently, so an
// element either run leaves unwritten shows as a difference.
#include <algorithm>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_support.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

struct Layout {
  int64_t offset;  // elements before row 0 in every activation buffer
  uint8_t poison;
};

// dx, dgamma and dbeta bytes of one backward run over `x`/`dy` placed at `layout`.
std::vector<uint8_t> RunBackward(NormOp op, DType dtype, const HostTensor& x, const HostTensor& dy,
                                 const HostTensor& gamma, const std::vector<float>& mean,
                                 const std::vector<float>& rstd, bool given_stats, Layout layout) {
  const int64_t rows = x.rows, h = x.cols;
  const std::size_t size = DTypeSize(dtype);
  const std::size_t tensor_bytes = x.bytes.size();
  const std::size_t offset_bytes = static_cast<std::size_t>(layout.offset) * size;
  DeviceBuffer x_dev(tensor_bytes + offset_bytes), dy_dev(tensor_bytes + offset_bytes),
      dx_dev(tensor_bytes + offset_bytes);
  std::vector<uint8_t> staged(tensor_bytes + offset_bytes, 0x5a);
  std::memcpy(staged.data() + offset_bytes, x.bytes.data(), tensor_bytes);
  x_dev.Upload(staged.data(), staged.size());
  std::memcpy(staged.data() + offset_bytes, dy.bytes.data(), tensor_bytes);
  dy_dev.Upload(staged.data(), staged.size());
  DeviceBuffer gamma_dev = gamma.ToDevice();
  DeviceBuffer mean_dev(rows * sizeof(float)), rstd_dev(rows * sizeof(float));
  mean_dev.Upload(mean.data(), rows * sizeof(float));
  rstd_dev.Upload(rstd.data(), rows * sizeof(float));
  DeviceBuffer dgamma_dev(h * sizeof(float)), dbeta_dev(h * sizeof(float));
  DeviceBuffer workspace(BackwardWorkspaceBytes(rows, h));
  for (const DeviceBuffer* b : {&dx_dev, &dgamma_dev, &dbeta_dev, &workspace}) {
    b->Poison(layout.poison);
  }

  BackwardArgs a;
  a.op = op;
  a.rows = rows;
  a.hidden = h;
  a.epsilon = 1e-5f;
  a.x_dtype = a.param_dtype = dtype;
  a.x = static_cast<const uint8_t*>(x_dev.get()) + offset_bytes;
  a.dy = static_cast<const uint8_t*>(dy_dev.get()) + offset_bytes;
  a.dx = static_cast<uint8_t*>(dx_dev.get()) + offset_bytes;
  a.x_row_stride = a.dy_row_stride = a.dx_row_stride = h;
  a.gamma = gamma_dev.get();
  a.mean = given_stats && op == NormOp::kLayerNorm ? static_cast<float*>(mean_dev.get()) : nullptr;
  a.rstd = given_stats ? static_cast<float*>(rstd_dev.get()) : nullptr;
  a.dgamma = static_cast<float*>(dgamma_dev.get());
  a.dbeta = op == NormOp::kLayerNorm ? static_cast<float*>(dbeta_dev.get()) : nullptr;
  const Status st = LaunchBackward(a, workspace.get(), workspace.bytes(), nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<uint8_t> dx_all = dx_dev.Download();
  std::vector<uint8_t> out(dx_all.begin() + static_cast<std::ptrdiff_t>(offset_bytes),
                           dx_all.end());
  for (const DeviceBuffer* b : {&dgamma_dev, &dbeta_dev}) {
    if (b == &dbeta_dev && a.dbeta == nullptr) continue;
    const std::vector<uint8_t> part = b->Download();
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

TEST(BackwardAlignment, MisalignedRowsGiveTheSameBits) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("backward alignment");
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (NormOp op : {NormOp::kLayerNorm, NormOp::kRmsNorm}) {
      for (int64_t h : {int64_t{64}, int64_t{768}, int64_t{4096}, int64_t{16384}}) {
        const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(3000, MaxCaseElements() / h));
        HostTensor x(dtype, rows, h, h), dy(dtype, rows, h, h), gamma(dtype, 1, h, h);
        x.FillNormal(rng, 0.3, 1.7);
        dy.FillNormal(rng, 0.0, 1.0);
        gamma.FillNormal(rng, 1.0, 0.5);
        // Any finite statistics do: both runs use the same ones.
        std::vector<float> mean(rows), rstd(rows);
        for (int64_t r = 0; r < rows; ++r) {
          mean[r] = static_cast<float>(x.At(r, r % h));
          rstd[r] = 0.5f + static_cast<float>(r % 7) * 0.25f;
        }
        for (bool given_stats : {true, false}) {
          const std::vector<uint8_t> aligned =
              RunBackward(op, dtype, x, dy, gamma, mean, rstd, given_stats, Layout{0, 0x7f});
          const std::vector<uint8_t> shifted =
              RunBackward(op, dtype, x, dy, gamma, mean, rstd, given_stats, Layout{1, 0x3c});
          ASSERT_EQ(aligned.size(), shifted.size());
          std::size_t differing = 0, first = aligned.size();
          for (std::size_t i = 0; i < aligned.size(); ++i) {
            if (aligned[i] != shifted[i]) {
              ++differing;
              first = std::min(first, i);
            }
          }
          EXPECT_EQ(differing, 0u)
              << NormOpName(op) << " " << DTypeName(dtype) << " rows=" << rows << " H=" << h
              << (given_stats ? " given" : " recomputed") << " statistics: first differing byte "
              << first << " of " << aligned.size();
        }
      }
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
