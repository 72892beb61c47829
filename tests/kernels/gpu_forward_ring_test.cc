// The forward tuning switches (kernels/src/forward_tuning.h). The ring
// forward kernel (one segment in the vector layout with four chunks a
// thread, more row groups than fit on the device at once: x staged through
// shared memory by asynchronous copies) against the double reference and,
// bit for bit, against the same rows cut into short segments of one
// multi-segment launch (which takes the register kernel), with and without
// the gamma/beta prefetch.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "forward_tuning.h"
#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "normsvc/kernels/gpu.h"

namespace normsvc::kernels::testing {
namespace {

// Rows enough that every plan's persistent blocks loop several times:
// at least 2^24 elements (the plans' row groups then exceed the resident
// blocks of an H200 at every H), plus a few so the last group is partial.
int64_t RingRows(int64_t hidden) { return ((int64_t{1} << 24) + hidden - 1) / hidden + 3; }

// Restores the process's tuning when a test ends, pass or fail.
class TuningScope {
 public:
  TuningScope() : saved_(detail::GetForwardTuning()) {}
  ~TuningScope() { detail::SetForwardTuning(saved_); }
  void Set(bool ring, bool prefetch_params) {
    detail::ForwardTuning t;
    t.ring = ring;
    t.prefetch_params = prefetch_params;
    detail::SetForwardTuning(t);
  }

 private:
  detail::ForwardTuning saved_;
};

TEST(ForwardRing, MatchesReferenceAndShortSegmentsBitForBit) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("ring forward");
  TuningScope tuning;
  int variant = 0;
  for (int64_t hidden : {768, 1024, 4096, 8192, 16384, 65536}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      ++variant;
      const int64_t width = 16 / static_cast<int64_t>(DTypeSize(dtype));
      ForwardSpec spec;
      spec.op = variant % 2 ? NormOp::kLayerNorm : NormOp::kRmsNorm;
      spec.x_dtype = spec.out_dtype = dtype;
      spec.param_dtype = dtype != DType::kF32 && variant % 3 == 0 ? DType::kF32 : dtype;
      spec.rows = RingRows(hidden);
      spec.hidden = hidden;
      // Offsets and pads that keep every row 16-byte aligned (the ring's case).
      spec.offset = (variant % 2) * width;
      spec.x_pad = (variant % 3 == 1) * width;
      spec.out_pad = (variant % 4 == 2) * 2 * width;
      spec.gamma = variant % 4 != 3;
      spec.beta = variant % 5 != 4;
      spec.stats = variant % 2 == 0;
      spec.x_mean = variant % 3 == 2 ? 1e3 : 0.3;  // a large mean for some LayerNorm rows
      ForwardCase c(spec, rng);
      c.Upload();
      c.PoisonOutputs();
      tuning.Set(/*ring=*/true, /*prefetch_params=*/variant % 2 == 0);
      const int64_t ring_launches = detail::RingForwardLaunches();
      const Status whole = LaunchForwardSegment(c.Segment(), nullptr);
      ASSERT_TRUE(whole.ok()) << whole.message();
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
      ASSERT_EQ(detail::RingForwardLaunches(), ring_launches + 1)
          << "did not take the ring kernel: " << Describe(spec);
      const std::vector<uint8_t> ring = c.OutputBytes();
      c.Check("ring, whole tensor");

      // The same rows as segments of 7 rows (the last shorter), one launch.
      const ForwardSegment base = c.Segment();
      std::vector<ForwardSegment> segments;
      for (int64_t first = 0; first < base.rows; first += 7) {
        ForwardSegment s = base;
        s.rows = std::min<int64_t>(7, base.rows - first);
        s.x = static_cast<const char*>(base.x) + first * base.x_row_stride * DTypeSize(dtype);
        s.out = static_cast<char*>(base.out) + first * base.out_row_stride * DTypeSize(dtype);
        if (base.mean != nullptr) s.mean = base.mean + first;
        if (base.rstd != nullptr) s.rstd = base.rstd + first;
        segments.push_back(s);
      }
      c.PoisonOutputs(0x5a);
      tuning.Set(/*ring=*/false, /*prefetch_params=*/variant % 2 == 1);
      DeviceBuffer workspace(ForwardWorkspaceBytes(static_cast<int>(segments.size())));
      const Status table = LaunchForward(segments.data(), static_cast<int>(segments.size()),
                                         workspace.get(), workspace.bytes(), nullptr, nullptr);
      ASSERT_TRUE(table.ok()) << table.message();
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
      EXPECT_EQ(c.OutputBytes(), ring) << "short segments differ: " << Describe(spec);
    }
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
