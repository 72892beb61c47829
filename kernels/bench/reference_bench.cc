// reference_bench: time of the CPU reference (the server's CPU backend) per
// call, per row and per element. Host only; needs no CUDA.
//
//   reference_bench [--json PATH] [--seconds S]
//
// Forward: LayerNorm with gamma and beta (param dtype fp32), mean and rstd
// saved; "fwd-batch" the same rows as one-row segments of one call (a server
// batch of one-row requests). Backward: LayerNorm with saved mean/rstd,
// gamma, dgamma and dbeta.
// Every case runs for about S seconds (default 0.25) after a warm-up call;
// the figure is the median of the per-call wall times. "1 thread" sets
// ReferenceOptions::max_threads = 1, "default" leaves it 0 (all hardware
// threads for large enough inputs).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "host_support.h"
#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::bench {
namespace {

using kernels::BackwardArgs;
using kernels::DType;
using kernels::ForwardSegment;
using kernels::NormOp;
using kernels::ReferenceOptions;

struct Record {
  std::string pass, dtype;
  int64_t rows = 0, hidden = 0;
  int threads = 0;  // max_threads as passed (0: default)
  double micros = 0;
  double MicrosPerRow() const { return micros / static_cast<double>(rows); }
  double NanosPerElement() const { return micros * 1e3 / static_cast<double>(rows * hidden); }
};

// Median wall time of `call()` in microseconds over about `seconds`.
template <typename Call>
double MedianMicros(const Call& call, double seconds) {
  call();  // warm-up: first-touch of outputs, thread creation paths
  std::vector<double> samples;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (samples.size() < 5 ||
         (std::chrono::steady_clock::now() < deadline && samples.size() < 100000)) {
    const auto start = std::chrono::steady_clock::now();
    call();
    samples.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

// One segment of `rows` rows, or (`batch`) `rows` one-row segments sharing
// gamma and beta: what the server's CPU executor hands over for `rows`
// one-row requests batched together.
Record TimeForward(DType dtype, int64_t rows, int64_t hidden, int threads, double seconds,
                   bool batch) {
  const std::vector<uint8_t> x = RandomHostArray(dtype, rows * hidden, -3.0f, 5.0f, 1);
  const std::vector<uint8_t> gamma = RandomHostArray(DType::kF32, hidden, 0.5f, 1.5f, 2);
  const std::vector<uint8_t> beta = RandomHostArray(DType::kF32, hidden, -0.5f, 0.5f, 3);
  std::vector<uint8_t> out(x.size(), 0x7f);
  std::vector<float> mean(rows), rstd(rows);
  ForwardSegment s;
  s.op = NormOp::kLayerNorm;
  s.rows = rows;
  s.hidden = hidden;
  s.x_dtype = dtype;
  s.out_dtype = dtype;
  s.param_dtype = DType::kF32;
  s.x = x.data();
  s.x_row_stride = hidden;
  s.gamma = gamma.data();
  s.beta = beta.data();
  s.out = out.data();
  s.out_row_stride = hidden;
  s.mean = mean.data();
  s.rstd = rstd.data();
  std::vector<ForwardSegment> segments{s};
  if (batch) {
    segments.assign(rows, s);
    for (int64_t r = 0; r < rows; ++r) {
      ForwardSegment& one = segments[r];
      one.rows = 1;
      one.x = x.data() + r * hidden * kernels::DTypeSize(dtype);
      one.out = out.data() + r * hidden * kernels::DTypeSize(dtype);
      one.mean = mean.data() + r;
      one.rstd = rstd.data() + r;
    }
  }
  const ReferenceOptions options{threads};
  const int count = static_cast<int>(segments.size());
  const double micros = MedianMicros(
      [&] {
        CheckStatus(kernels::ReferenceForward(segments.data(), count, options), "ReferenceForward");
      },
      seconds);
  return {
      batch ? "fwd-batch" : "forward", kernels::DTypeName(dtype), rows, hidden, threads, micros};
}

Record TimeBackward(DType dtype, int64_t rows, int64_t hidden, int threads, double seconds) {
  const std::vector<uint8_t> x = RandomHostArray(dtype, rows * hidden, -3.0f, 5.0f, 4);
  const std::vector<uint8_t> dy = RandomHostArray(dtype, rows * hidden, -1.0f, 1.0f, 5);
  const std::vector<uint8_t> gamma = RandomHostArray(DType::kF32, hidden, 0.5f, 1.5f, 6);
  std::vector<float> mean(rows), rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {  // plausible statistics of x
    mean[r] = 1.0f;
    rstd[r] = 0.4f;
  }
  std::vector<uint8_t> dx(x.size(), 0x7f);
  std::vector<float> dgamma(hidden), dbeta(hidden);
  BackwardArgs a;
  a.op = NormOp::kLayerNorm;
  a.rows = rows;
  a.hidden = hidden;
  a.x_dtype = dtype;
  a.param_dtype = DType::kF32;
  a.x = x.data();
  a.x_row_stride = hidden;
  a.dy = dy.data();
  a.dy_row_stride = hidden;
  a.gamma = gamma.data();
  a.mean = mean.data();
  a.rstd = rstd.data();
  a.dx = dx.data();
  a.dx_row_stride = hidden;
  a.dgamma = dgamma.data();
  a.dbeta = dbeta.data();
  const ReferenceOptions options{threads};
  const double micros = MedianMicros(
      [&] { CheckStatus(kernels::ReferenceBackward(a, options), "ReferenceBackward"); }, seconds);
  return {"backward", kernels::DTypeName(dtype), rows, hidden, threads, micros};
}

void WriteJson(const char* path, const std::vector<Record>& records) {
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::perror(path);
    std::exit(1);
  }
  std::fprintf(f, "{\"hardware_threads\": %u, \"records\": [\n",
               std::thread::hardware_concurrency());
  for (std::size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    std::fprintf(f,
                 "  {\"pass\": \"%s\", \"op\": \"layer_norm\", \"dtype\": \"%s\", \"rows\": %lld, "
                 "\"hidden\": %lld, \"max_threads\": %d, \"micros\": %.3f, "
                 "\"micros_per_row\": %.3f, \"nanos_per_element\": %.3f}%s\n",
                 r.pass.c_str(), r.dtype.c_str(), static_cast<long long>(r.rows),
                 static_cast<long long>(r.hidden), r.threads, r.micros, r.MicrosPerRow(),
                 r.NanosPerElement(), i + 1 < records.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

}  // namespace
}  // namespace normsvc::bench

int main(int argc, char** argv) {
  using namespace normsvc::bench;
  const char* json = nullptr;
  double seconds = 0.25;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  std::vector<Record> records;
  std::printf("%-8s %-5s %5s %6s %8s %12s %12s %10s\n", "pass", "dtype", "rows", "hidden",
              "threads", "us/call", "us/row", "ns/elem");
  for (const char* pass : {"forward", "fwd-batch", "backward"}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t hidden : {int64_t{1024}, int64_t{4096}}) {
        for (int64_t rows : {int64_t{1}, int64_t{64}}) {
          for (int threads : {1, 0}) {
            const bool batch = std::strcmp(pass, "fwd-batch") == 0;
            if (batch && rows == 1) continue;  // the same as forward
            const Record r = std::strcmp(pass, "backward") != 0
                                 ? TimeForward(dtype, rows, hidden, threads, seconds, batch)
                                 : TimeBackward(dtype, rows, hidden, threads, seconds);
            std::printf("%-8s %-5s %5lld %6lld %8s %12.2f %12.3f %10.2f\n", r.pass.c_str(),
                        r.dtype.c_str(), static_cast<long long>(r.rows),
                        static_cast<long long>(r.hidden), threads == 1 ? "1" : "default", r.micros,
                        r.MicrosPerRow(), r.NanosPerElement());
            records.push_back(r);
          }
        }
      }
    }
  }
  if (json != nullptr) WriteJson(json, records);
  return 0;
}
