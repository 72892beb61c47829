// The ring forward kernel (one segment in the vector layout with four chunks
// a thread, more row groups than fit on the device at once: x staged through
// shared memory by asynchronous copies), taken for every plan it accepts
// (RingPolicy::kEveryPlan, kernels/src/ring_policy.h), against the double
// reference and, bit for bit, against the same rows cut into short segments
// of one multi-segment launch (which takes the register kernel); and the
// default policy, which takes it for two-block clusters only.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_forward_case.h"
#include "gpu_test_support.h"
#include "launch_plan.h"
#include "normsvc/kernels/gpu.h"
#include "ring_policy.h"

namespace normsvc::kernels::testing {
namespace {

// Rows enough that every plan's persistent blocks loop several times:
// at least 2^24 elements (the plans' row groups then exceed the resident
// blocks of an H200 at every H), plus a few so the last group is partial.
int64_t RingRows(int64_t hidden) { return ((int64_t{1} << 24) + hidden - 1) / hidden + 3; }

// Restores the process's ring policy when a test ends, pass or fail.
class RingPolicyScope {
 public:
  RingPolicyScope() : saved_(detail::GetRingPolicy()) {}
  ~RingPolicyScope() { detail::SetRingPolicy(saved_); }

 private:
  detail::RingPolicy saved_;
};

TEST(ForwardRing, MatchesReferenceAndShortSegmentsBitForBit) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("ring forward");
  RingPolicyScope restore;
  int variant = 0;
  for (int64_t hidden : {768, 1024, 4096, 8192, 16384, 65536}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      // Rows of 65536 are staged (launch_plan.cc, StagesClusterRow): no ring.
      if (detail::PlanForward(hidden, dtype).layout != detail::Layout::kVector) continue;
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
      detail::SetRingPolicy(detail::RingPolicy::kEveryPlan);
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
      // The same poison as the ring run: the pad columns between rows are
      // never written, and the comparison covers them.
      c.PoisonOutputs();
      detail::SetRingPolicy(detail::RingPolicy::kOff);
      DeviceBuffer workspace(ForwardWorkspaceBytes(static_cast<int>(segments.size())));
      const Status table = LaunchForward(segments.data(), static_cast<int>(segments.size()),
                                         workspace.get(), workspace.bytes(), nullptr, nullptr);
      ASSERT_TRUE(table.ok()) << table.message();
      CUDA_ASSERT_OK(cudaDeviceSynchronize());
      EXPECT_EQ(c.OutputBytes(), ring) << "short segments differ: " << Describe(spec);
    }
  }
}

// The default policy: a two-block cluster plan (fp32 H = 16384, 16-bit
// H = 32768) takes the ring, an in-block plan (H = 4096) does not.
TEST(ForwardRing, DefaultPolicyTakesItForTwoBlockClustersOnly) {
  NORMSVC_REQUIRE_GPU();
  std::mt19937_64 rng = SeededRng("ring default policy");
  RingPolicyScope restore;
  detail::SetRingPolicy(detail::RingPolicy::kTwoBlockClusters);
  struct Shape {
    DType dtype;
    int64_t hidden;
    bool ring;
  };
  for (const Shape& shape : {Shape{DType::kF32, 16384, true}, Shape{DType::kBF16, 32768, true},
                             Shape{DType::kBF16, 4096, false}}) {
    ForwardSpec spec;
    spec.x_dtype = spec.out_dtype = spec.param_dtype = shape.dtype;
    spec.rows = RingRows(shape.hidden);
    spec.hidden = shape.hidden;
    spec.stats = true;
    ForwardCase c(spec, rng);
    c.Upload();
    c.PoisonOutputs();
    const int64_t before = detail::RingForwardLaunches();
    const Status st = LaunchForwardSegment(c.Segment(), nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    EXPECT_EQ(detail::RingForwardLaunches() - before, shape.ring ? 1 : 0) << Describe(spec);
    c.Check("default ring policy");
  }
}

}  // namespace
}  // namespace normsvc::kernels::testing
