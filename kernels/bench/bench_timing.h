// Timing helpers for norm_bench: device buffers filled with random bits of
// the right dtype, median of CUDA-event timings over rotating buffer sets,
// and per-call time from CUDA graph replay.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "host_support.h"
#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/types.h"

namespace normsvc::bench {

inline void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

// Device memory holding `elements` values of `dtype` drawn uniformly from
// [lo, hi) (RandomHostArray).
inline void* RandomDeviceArray(kernels::DType dtype, int64_t elements, float lo, float hi,
                               uint64_t seed) {
  const std::vector<uint8_t> host = RandomHostArray(dtype, elements, lo, hi, seed);
  void* device = nullptr;
  Check(cudaMalloc(&device, host.size()), "cudaMalloc");
  Check(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  return device;
}

inline void* DeviceArray(std::size_t bytes) {
  void* device = nullptr;
  Check(cudaMalloc(&device, bytes), "cudaMalloc");
  Check(cudaMemset(device, 0x7f, bytes), "cudaMemset");
  return device;
}

// Median time in microseconds of `run(set)` over `iterations` launches,
// rotating through `sets` buffer sets, each launch timed by its own events.
inline double MedianMicros(int sets, int iterations, cudaStream_t stream,
                           const std::function<void(int)>& run) {
  for (int w = 0; w < 3 * sets; ++w) run(w % sets);  // warm-up
  std::vector<cudaEvent_t> events(2 * iterations);
  for (cudaEvent_t& e : events) Check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < iterations; ++i) {
    Check(cudaEventRecord(events[2 * i], stream), "cudaEventRecord");
    run(i % sets);
    Check(cudaEventRecord(events[2 * i + 1], stream), "cudaEventRecord");
  }
  Check(cudaStreamSynchronize(stream), "synchronize");
  Check(cudaGetLastError(), "launch");
  std::vector<double> micros(iterations);
  for (int i = 0; i < iterations; ++i) {
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]), "cudaEventElapsedTime");
    micros[i] = 1000.0 * ms;
  }
  for (cudaEvent_t& e : events) cudaEventDestroy(e);
  std::nth_element(micros.begin(), micros.begin() + iterations / 2, micros.end());
  return micros[iterations / 2];
}

// Time per call in microseconds: `calls` calls of `run` captured in one CUDA
// graph, the graph replayed `replays` times (median replay / calls).
inline double GraphMicrosPerCall(int calls, int replays, cudaStream_t stream,
                                 const std::function<void(int)>& run) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < calls; ++i) run(i);
  Check(cudaStreamEndCapture(stream, &graph), "end capture");
  Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  const double replay = MedianMicros(
      1, replays, stream, [&](int) { Check(cudaGraphLaunch(exec, stream), "graph launch"); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return replay / calls;
}

}  // namespace normsvc::bench
