// round_trip_bench: the host-side cost of one small batch's trip through the
// GPU, as the server's GPU executor makes it (server/gpu_executor.cc): pack
// the inputs into pinned staging, one H2D copy, one forward launch, one D2H
// copy, wait for the end event, unpack. Wall time per round trip (steady
// clock), one round trip at a time, so it is the latency a request at one in
// flight pays for the GPU part of its path, for each way of issuing it:
//
//   timed    the executor's way: events before and after each of the three
//            operations (its per-stage metrics) and their elapsed times read
//   untimed  the same three operations and only the end event
//   graph    the three operations and the four events captured once as a
//            CUDA graph (the events as external records), replayed, and the
//            elapsed times read: what a replay that kept the per-stage
//            metrics would cost (server/README.md: slower than the calls)
//
//   round_trip_bench [--rows N] [--hidden H] [--iterations N] [--json PATH]
//
// fp32 LayerNorm with gamma and beta in the request (the service's 1x4096
// benchmark load: 48 KB in, 16 KB out for one row of 4096). Waits spin on
// the event (cudaEventQuery), as the executor's `auto` wait does when
// nothing else is queued. Prints a table of p50 / p90 / p99 microseconds
// and writes JSON.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "normsvc/kernels/gpu.h"

namespace {

using normsvc::kernels::DType;
using normsvc::kernels::ForwardSegment;
using normsvc::kernels::NormOp;

void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "round_trip_bench: %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

void Check(const normsvc::kernels::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "round_trip_bench: %s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

Percentiles Summarize(std::vector<double> micros) {
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[static_cast<std::size_t>(q * (micros.size() - 1))]; };
  return {at(0.50), at(0.90), at(0.99)};
}

// One slot of the executor: pinned staging and device memory laid out as
// [table room | x | gamma | beta | out], a stream and four events.
struct Slot {
  char* host = nullptr;
  char* device = nullptr;
  std::size_t table_room = 0;
  std::size_t input_bytes = 0;
  std::size_t output_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, h2d = nullptr, kernel = nullptr, d2h = nullptr;
};

void Spin(cudaEvent_t event) {
  cudaError_t state;
  while ((state = cudaEventQuery(event)) == cudaErrorNotReady) {
  }
  Check(state, "event query");
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 1;
  int64_t hidden = 4096;
  int iterations = 20000;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--hidden") && i + 1 < argc) {
      hidden = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: round_trip_bench [--rows N] [--hidden H] [--iterations N] "
                   "[--json PATH]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (rows < 1 || hidden < 1 || iterations < 100) {
    std::fprintf(stderr, "round_trip_bench: rows and hidden >= 1, iterations >= 100\n");
    return 2;
  }

  const std::size_t row_bytes = static_cast<std::size_t>(hidden) * sizeof(float);
  const std::size_t x_bytes = static_cast<std::size_t>(rows) * row_bytes;
  Slot slot;
  slot.table_room = normsvc::kernels::ForwardWorkspaceBytes(1);
  slot.input_bytes = x_bytes + 2 * row_bytes;
  slot.output_bytes = x_bytes;
  const std::size_t total = slot.table_room + slot.input_bytes + slot.output_bytes;
  Check(cudaHostAlloc(reinterpret_cast<void**>(&slot.host), total, cudaHostAllocDefault),
        "cudaHostAlloc");
  Check(cudaMalloc(reinterpret_cast<void**>(&slot.device), total), "cudaMalloc");
  Check(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking), "stream");
  for (cudaEvent_t* e : {&slot.start, &slot.h2d, &slot.kernel, &slot.d2h}) {
    Check(cudaEventCreate(e), "event");
  }
  char* host_inputs = slot.host + slot.table_room;
  char* device_inputs = slot.device + slot.table_room;

  // The request's tensors (as received: pageable memory), random, nonzero.
  std::mt19937_64 rng(12345);
  std::normal_distribution<float> normal(0.5f, 1.0f);
  std::vector<float> request(static_cast<std::size_t>(rows * hidden + 2 * hidden));
  for (float& v : request) v = normal(rng);
  std::vector<float> reply(static_cast<std::size_t>(rows * hidden));

  ForwardSegment segment;
  segment.op = NormOp::kLayerNorm;
  segment.rows = rows;
  segment.hidden = hidden;
  segment.epsilon = 1e-5f;
  segment.x_dtype = segment.out_dtype = segment.param_dtype = DType::kF32;
  segment.x = device_inputs;
  segment.x_row_stride = hidden;
  segment.gamma = device_inputs + x_bytes;
  segment.beta = device_inputs + x_bytes + row_bytes;
  segment.out = device_inputs + slot.input_bytes;
  segment.out_row_stride = hidden;

  auto pack = [&] { std::memcpy(host_inputs, request.data(), slot.input_bytes); };
  auto unpack = [&] {
    std::memcpy(reply.data(), host_inputs + slot.input_bytes, slot.output_bytes);
  };
  struct Mode {
    const char* name;
    std::vector<double> micros;
  };
  std::vector<Mode> modes = {{"timed", {}}, {"untimed", {}}, {"graph", {}}};

  // A round: the three operations and the end event; with `stage_events`
  // (the executor's way) also an event before and after each (`flags`:
  // cudaEventRecordExternal while capturing).
  auto issue = [&](bool stage_events, unsigned int flags) {
    auto record = [&](cudaEvent_t event) {
      Check(cudaEventRecordWithFlags(event, slot.stream, flags), "record");
    };
    if (stage_events) record(slot.start);
    Check(cudaMemcpyAsync(device_inputs, host_inputs, slot.input_bytes, cudaMemcpyHostToDevice,
                          slot.stream),
          "H2D");
    if (stage_events) record(slot.h2d);
    Check(normsvc::kernels::LaunchForwardWithUploadedTable(&segment, 1, slot.device,
                                                           slot.table_room, slot.stream),
          "launch");
    if (stage_events) record(slot.kernel);
    Check(cudaMemcpyAsync(host_inputs + slot.input_bytes, device_inputs + slot.input_bytes,
                          slot.output_bytes, cudaMemcpyDeviceToHost, slot.stream),
          "D2H");
    record(slot.d2h);
  };
  auto read_timings = [&] {
    float a, b, c;
    Check(cudaEventElapsedTime(&a, slot.start, slot.h2d), "elapsed");
    Check(cudaEventElapsedTime(&b, slot.h2d, slot.kernel), "elapsed");
    Check(cudaEventElapsedTime(&c, slot.kernel, slot.d2h), "elapsed");
  };

  cudaGraphExec_t graph_exec = nullptr;
  {
    cudaGraph_t graph;
    Check(cudaStreamBeginCapture(slot.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    issue(true, cudaEventRecordExternal);
    Check(cudaStreamEndCapture(slot.stream, &graph), "end capture");
    Check(cudaGraphInstantiate(&graph_exec, graph, 0), "instantiate");
    Check(cudaGraphDestroy(graph), "graph destroy");
  }

  auto round_trip = [&](int mode) {
    pack();
    if (mode == 0) {
      issue(true, cudaEventRecordDefault);
      Spin(slot.d2h);
      read_timings();
    } else if (mode == 1) {
      issue(false, cudaEventRecordDefault);
      Spin(slot.d2h);
    } else {
      Check(cudaGraphLaunch(graph_exec, slot.stream), "graph launch");
      Spin(slot.d2h);
      read_timings();
    }
    unpack();
  };

  // Interleaved in blocks of 100 so that clock and host noise fall on every
  // mode alike; the first block of each is a warm-up.
  constexpr int kBlock = 100;
  for (int m = 0; m < 3; ++m) {
    for (int i = 0; i < kBlock; ++i) round_trip(m);
  }
  for (int done = 0; done < iterations; done += kBlock) {
    for (int m = 0; m < 3; ++m) {
      for (int i = 0; i < kBlock; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        round_trip(m);
        const auto t1 = std::chrono::steady_clock::now();
        modes[m].micros.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    }
  }

  // The last reply is the kernel's: checked against a double-precision row.
  {
    const float* x = request.data();
    const float* gamma = x + rows * hidden;
    const float* beta = gamma + hidden;
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < hidden; ++c) mean += x[r * hidden + c];
      mean /= static_cast<double>(hidden);
      for (int64_t c = 0; c < hidden; ++c) {
        const double d = x[r * hidden + c] - mean;
        var += d * d;
      }
      var /= static_cast<double>(hidden);
      const double rstd = 1.0 / std::sqrt(var + 1e-5);
      for (int64_t c = 0; c < hidden; ++c) {
        const double want = (x[r * hidden + c] - mean) * rstd * gamma[c] + beta[c];
        worst = std::max(worst, std::abs(want - reply[r * hidden + c]) / (1.0 + std::abs(want)));
      }
    }
    if (!(worst <= 1e-5)) {
      std::fprintf(stderr, "round_trip_bench: wrong result (relative error %.3g)\n", worst);
      return 1;
    }
  }

  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf(
      "device: %s; %lld x %lld fp32 LayerNorm, %zu bytes in, %zu out, %d round trips a mode\n",
      prop.name, static_cast<long long>(rows), static_cast<long long>(hidden), slot.input_bytes,
      slot.output_bytes, iterations);
  std::printf("| mode | p50 us | p90 us | p99 us |\n| --- | ---: | ---: | ---: |\n");
  FILE* out = json ? std::fopen(json, "w") : nullptr;
  if (out) {
    std::fprintf(out, "{\"device\": \"%s\", \"rows\": %lld, \"hidden\": %lld, \"modes\": [",
                 prop.name, static_cast<long long>(rows), static_cast<long long>(hidden));
  }
  for (std::size_t m = 0; m < modes.size(); ++m) {
    const Percentiles p = Summarize(modes[m].micros);
    std::printf("| %s | %.1f | %.1f | %.1f |\n", modes[m].name, p.p50, p.p90, p.p99);
    if (out) {
      std::fprintf(out,
                   "%s{\"mode\": \"%s\", \"p50_us\": %.2f, \"p90_us\": %.2f, \"p99_us\": %.2f}",
                   m ? ", " : "", modes[m].name, p.p50, p.p90, p.p99);
    }
  }
  if (out) {
    std::fprintf(out, "]}\n");
    std::fclose(out);
  }
  cudaGraphExecDestroy(graph_exec);
  cudaFreeHost(slot.host);
  cudaFree(slot.device);
  return 0;
}
