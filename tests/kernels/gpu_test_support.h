// Shared pieces of the GPU kernel tests: device detection, device buffers,
// random tensors in any dtype, and the error metric against the double
// reference.
//
// Error metric (stated once, used by every GPU test):
//   s = max(1, max |ref| over the row)                 (the row's output scale)
//   fp32 output:       |out - ref| <= 1e-5 * s
//   fp16/bf16 output:  |out - ref| <= ulp(ref) + 1e-5 * s
// where ref is the double-precision result and ulp(ref) the spacing of the
// output format at |ref| (one rounding of the correctly rounded reference,
// plus the fp32 arithmetic error). NaN must meet NaN; infinities must match.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels::testing {

// True when a CUDA device is usable; otherwise `reason` says why.
bool GpuAvailable(std::string* reason);

#define NORMSVC_REQUIRE_GPU()                                         \
  do {                                                                \
    std::string no_gpu_reason;                                        \
    if (!::normsvc::kernels::testing::GpuAvailable(&no_gpu_reason)) { \
      GTEST_SKIP() << "no CUDA device: " << no_gpu_reason;            \
    }                                                                 \
  } while (0)

#define CUDA_ASSERT_OK(expr)                                       \
  do {                                                             \
    const cudaError_t cuda_assert_error = (expr);                  \
    ASSERT_EQ(cuda_assert_error, cudaSuccess)                      \
        << #expr << ": " << cudaGetErrorString(cuda_assert_error); \
  } while (0)

// Owns device memory; every byte is poisoned at allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  void Upload(const void* host, std::size_t bytes) const;
  std::vector<uint8_t> Download() const;
  // Fills every byte with `value` (0x7f: 3.4e38 in fp32/bf16, NaN in fp16).
  void Poison(uint8_t value = 0x7f) const;

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A host tensor of `rows` rows of `stride` elements (the first `cols` used).
struct HostTensor {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType d, int64_t r, int64_t c, int64_t s);
  double At(int64_t r, int64_t c) const;
  void Set(int64_t r, int64_t c, double value);  // rounds like StoreFromDouble
  // Every element (padding too) drawn from N(mean, stddev), rounded to dtype.
  void FillNormal(std::mt19937_64& rng, double mean, double stddev);
  std::vector<double> Row(int64_t r) const;
  DeviceBuffer ToDevice() const;
};

// Interprets downloaded bytes as a tensor of the given shape.
HostTensor FromDevice(const DeviceBuffer& buffer, DType dtype, int64_t rows, int64_t cols,
                      int64_t stride);

// Spacing of `dtype` at |value| (0 for fp32 outputs, which use only s).
double OutputUlp(DType dtype, double value);

// Checks one value against the reference with the metric above; on failure
// returns false and fills `why`. `ratio` gets |out - ref| / tolerance.
bool WithinTolerance(DType dtype, double out, double ref, double scale, double* ratio,
                     std::string* why);

// Fresh random seed per run, printed so a failure can be reproduced.
std::mt19937_64 SeededRng(const std::string& what);

// Largest rows x H of one case in the test matrices: 2^24, or
// NORMSVC_TEST_MAX_ELEMENTS when set (compute-sanitizer runs use fewer rows;
// every H, dtype and variant still runs).
int64_t MaxCaseElements();

// Runs body(begin, end) over [0, n) on all hardware threads.
void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body);

}  // namespace normsvc::kernels::testing
