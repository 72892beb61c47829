// One forward test case on the GPU: random inputs in any dtype and layout,
// device buffers, the segment that describes them, and the check of every
// output against the double reference (metric in gpu_test_support.h).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "normsvc/kernels/types.h"

namespace normsvc::kernels::testing {

struct ForwardSpec {
  NormOp op = NormOp::kLayerNorm;
  DType x_dtype = DType::kF32;
  DType out_dtype = DType::kF32;
  DType param_dtype = DType::kF32;
  int64_t rows = 1;
  int64_t hidden = 1;
  int64_t x_pad = 0;    // extra elements per row of x, residual and residual_out
  int64_t out_pad = 0;  // extra elements per row of out
  int64_t offset = 0;   // elements before row 0 in every activation buffer
  bool gamma = true;
  bool beta = true;  // LayerNorm only
  bool residual = false;
  bool residual_out = false;
  bool stats = false;  // mean (LayerNorm) and rstd
  float epsilon = 1e-5f;
  double x_mean = 0.3;
  double x_stddev = 1.7;
};

std::string Describe(const ForwardSpec& spec);

class ForwardCase {
 public:
  ForwardCase(const ForwardSpec& spec, std::mt19937_64& rng);

  // Inputs may be rewritten before Upload().
  HostTensor& x() { return x_; }
  HostTensor& residual() { return residual_; }
  void Upload();
  // Fills every output buffer with `value` bytes.
  void PoisonOutputs(uint8_t value = 0x7f);
  ForwardSegment Segment() const;
  // Checks every output, adds gtest failures (at most a few messages), and
  // returns the largest error / tolerance seen.
  double Check(const std::string& label) const;
  // All output bytes (out, residual_out, mean, rstd) for bitwise comparisons.
  std::vector<uint8_t> OutputBytes() const;
  // The same outputs without the padding between rows: equal for two cases
  // of equal inputs whatever their row pitches.
  std::vector<uint8_t> DenseOutputBytes() const;
  const ForwardSpec& spec() const { return spec_; }

 private:
  ForwardSpec spec_;
  uint8_t poison_ = 0x7f;
  HostTensor x_, residual_, gamma_, beta_;
  DeviceBuffer x_dev_, residual_dev_, residual_out_dev_, gamma_dev_, beta_dev_, out_dev_;
  DeviceBuffer mean_dev_, rstd_dev_;
};

// Appends two uploaded cases of `spec` drawn from the same random stream (the
// same data): the first at spec's offset 0, the second at offset 1, off
// 16-byte alignment, which takes the element-wise path.
void AddAlignedAndMisalignedPair(ForwardSpec spec, std::mt19937_64& rng,
                                 std::vector<std::unique_ptr<ForwardCase>>& cases);

// Returns the output bytes of `c` after running it alone as one segment.
std::vector<uint8_t> RunAlone(ForwardCase& c);

// Launches `segments` (the segments of `cases`, and any others) as one
// multi-segment launch twice: from pageable memory (the table copied to the
// workspace), then from pinned staging (read in place when the segments
// average two rows or fewer, else copied). After each, every case
// must give the bits it gave alone (`alone[i]`, from RunAlone) and pass its
// Check; prints the largest error / tolerance under `tag`.
void CheckMixedLaunchBothWays(const std::vector<ForwardSegment>& segments,
                              const std::vector<std::unique_ptr<ForwardCase>>& cases,
                              const std::vector<std::vector<uint8_t>>& alone, const char* tag);

}  // namespace normsvc::kernels::testing
