#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdio>
namespace cg = cooperative_groups;
__global__ void Writer(float* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = a[i] * 0.5f + 1.0f;
}
__global__ void __launch_bounds__(768, 1)
    Coop(float* a, int n, int syncs, unsigned long long* cyc) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  cg::grid_group g = cg::this_grid();
  long long t0 = clock64();
  for (int s = 0; s < syncs; ++s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += 1.0f;
    g.sync();
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) *cyc = clock64() - t0;
}
#define C(x)                                         \
  do {                                               \
    cudaError_t e = (x);                             \
    printf("%-60s %s\n", #x, cudaGetErrorString(e)); \
  } while (0)
int main() {
  int dev = 0, sms = 0, coop = 0, per_sm = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Coop, 768, 0);
  printf("sms %d coop %d per_sm %d\n", sms, coop, per_sm);
  float* a;
  unsigned long long* cyc;
  C(cudaMalloc(&a, 1 << 24));
  C(cudaMalloc(&cyc, 8));
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  int n = 132 * 768;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int mode = 0; mode < 4; ++mode) {
    bool pdl = mode & 1, cooperative = mode & 2;
    for (int syncs : {0, 1, 101}) {
      cudaLaunchAttribute attrs[2];
      int na = 0;
      if (cooperative) {
        attrs[na].id = cudaLaunchAttributeCooperative;
        attrs[na].val.cooperative = 1;
        ++na;
      }
      if (pdl) {
        attrs[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[na].val.programmaticStreamSerializationAllowed = 1;
        ++na;
      }
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(132);
      cfg.blockDim = dim3(768);
      cfg.stream = st;
      cfg.attrs = attrs;
      cfg.numAttrs = na;
      if (!cooperative && syncs) continue;
      float best = 1e9;
      cudaError_t err = cudaSuccess;
      for (int rep = 0; rep < 50; ++rep) {
        Writer<<<n / 256, 256, 0, st>>>(a, n);
        cudaEventRecord(e0, st);
        err = cudaLaunchKernelEx(&cfg, Coop, a, n, syncs, cyc);
        if (err != cudaSuccess) break;
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
      }
      cudaError_t sync_err = cudaStreamSynchronize(st);
      unsigned long long c = 0;
      cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
      printf("pdl %d coop %d syncs %3d launch=%s sync=%s best %.2f us cycles %llu\n", pdl,
             cooperative, syncs, cudaGetErrorString(err), cudaGetErrorString(sync_err), best * 1e3,
             c);
      cudaGetLastError();
    }
  }
  return 0;
}
