#include "gpu_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <thread>

#include "normsvc/kernels/float16.h"

namespace normsvc::kernels::testing {

bool GpuAvailable(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    *reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(error);
    return false;
  }
  if (count == 0) {
    *reason = "cudaGetDeviceCount returned 0";
    return false;
  }
  return true;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  if (cudaMalloc(&data_, bytes) != cudaSuccess) {
    ADD_FAILURE() << "cudaMalloc of " << bytes << " bytes failed";
    data_ = nullptr;
    bytes_ = 0;
    return;
  }
  Poison();
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::Upload(const void* host, std::size_t bytes) const {
  EXPECT_LE(bytes, bytes_);
  EXPECT_EQ(cudaMemcpy(data_, host, std::min(bytes, bytes_), cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<uint8_t> DeviceBuffer::Download() const {
  std::vector<uint8_t> host(bytes_);
  if (bytes_ > 0) {
    EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return host;
}

void DeviceBuffer::Poison(uint8_t value) const {
  if (bytes_ > 0) {
    EXPECT_EQ(cudaMemset(data_, value, bytes_), cudaSuccess);
  }
}

HostTensor::HostTensor(DType d, int64_t r, int64_t c, int64_t s)
    : dtype(d),
      rows(r),
      cols(c),
      stride(s),
      bytes(static_cast<std::size_t>(r * s) * DTypeSize(d)) {}

double HostTensor::At(int64_t r, int64_t c) const {
  return LoadAsFloat(bytes.data(), dtype, r * stride + c);
}

void HostTensor::Set(int64_t r, int64_t c, double value) {
  StoreFromDouble(bytes.data(), dtype, r * stride + c, value);
}

void HostTensor::FillNormal(std::mt19937_64& rng, double mean, double stddev) {
  // Blocks of 64 Ki elements, each from its own generator seeded by `rng`:
  // reproducible from rng's state, filled in parallel.
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t n = rows * stride;
  std::vector<uint64_t> seeds((n + kBlock - 1) / kBlock);
  for (uint64_t& seed : seeds) seed = rng();
  ParallelFor(static_cast<int64_t>(seeds.size()), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      std::mt19937_64 local(seeds[b]);
      std::normal_distribution<double> dist(mean, stddev);
      for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        StoreFromDouble(bytes.data(), dtype, i, dist(local));
      }
    }
  });
}

std::vector<double> HostTensor::Row(int64_t r) const {
  std::vector<double> values(cols);
  for (int64_t c = 0; c < cols; ++c) values[c] = At(r, c);
  return values;
}

DeviceBuffer HostTensor::ToDevice() const {
  DeviceBuffer buffer(bytes.size());
  buffer.Upload(bytes.data(), bytes.size());
  return buffer;
}

HostTensor FromDevice(const DeviceBuffer& buffer, DType dtype, int64_t rows, int64_t cols,
                      int64_t stride) {
  HostTensor t(dtype, rows, cols, stride);
  const std::vector<uint8_t> host = buffer.Download();
  std::memcpy(t.bytes.data(), host.data(), std::min(host.size(), t.bytes.size()));
  return t;
}

double OutputUlp(DType dtype, double value) {
  const double a = std::fabs(value);
  if (dtype == DType::kF32 || !std::isfinite(a)) return 0.0;
  const int mantissa_bits = dtype == DType::kF16 ? 10 : 7;
  const int min_exponent = dtype == DType::kF16 ? -14 : -126;
  int exponent = a > 0 ? static_cast<int>(std::floor(std::log2(a))) : min_exponent;
  exponent = std::max(exponent, min_exponent);
  return std::ldexp(1.0, exponent - mantissa_bits);
}

bool WithinTolerance(DType dtype, double out, double ref, double scale, double* ratio,
                     std::string* why) {
  *ratio = 0.0;
  if (std::isnan(ref) || std::isnan(out)) {
    if (std::isnan(ref) && std::isnan(out)) return true;
    std::ostringstream s;
    s << "out " << out << " ref " << ref << " (NaN must meet NaN)";
    *why = s.str();
    *ratio = INFINITY;
    return false;
  }
  if (std::isinf(ref) || std::isinf(out)) {
    if (out == ref) return true;
    std::ostringstream s;
    s << "out " << out << " ref " << ref << " (infinities must match)";
    *why = s.str();
    *ratio = INFINITY;
    return false;
  }
  const double tolerance = OutputUlp(dtype, ref) + 1e-5 * std::max(1.0, scale);
  const double error = std::fabs(out - ref);
  *ratio = error / tolerance;
  if (error <= tolerance) return true;
  std::ostringstream s;
  s.precision(9);
  s << "out " << out << " ref " << ref << " error " << error << " > tolerance " << tolerance;
  *why = s.str();
  return false;
}

std::mt19937_64 SeededRng(const std::string& what) {
  const uint64_t seed =
      (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::cout << "[ seed     ] " << what << ": " << seed << "\n";
  return std::mt19937_64(seed);
}

int64_t MaxCaseElements() {
  static const int64_t limit = [] {
    const char* text = std::getenv("NORMSVC_TEST_MAX_ELEMENTS");
    const long long value = text != nullptr ? std::atoll(text) : 0;
    if (value > 0) {
      std::cout << "[ limit    ] at most " << value << " elements a case\n";
      return static_cast<int64_t>(value);
    }
    return int64_t{1} << 24;
  }();
  return limit;
}

void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), n);
  if (threads <= 1) {
    body(0, n);
    return;
  }
  std::vector<std::thread> workers;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin >= end) break;
    workers.emplace_back(body, begin, end);
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace normsvc::kernels::testing
