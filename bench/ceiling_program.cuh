// What the ceiling programs (decode_ceiling.cu, moe_ceiling.cu) share: the GPU's clock for their
// phases, the timing of a launch (the median of 20 after 5 not counted) and the driver's tensor-map
// encoder.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda_check.h"

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <typename T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median time of `launch()` (whatever it enqueues on the default stream), in microseconds: 25
// launches, each timed alone between two events, the first 5 not counted; `prepare()` runs before each,
// outside the events.
template <typename Prepare, typename Launch>
float median_launch_us(Prepare prepare, Launch launch) {
  cudaEvent_t a, e;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&e));
  std::vector<float> times;
  for (int rep = 0; rep < 25; ++rep) {
    prepare();
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(e));
    CHECK(cudaEventSynchronize(e));
    CHECK(cudaGetLastError());
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, e));
    if (rep >= 5) times.push_back(ms * 1e3f);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(e));
  return median(times);
}

// The driver's cuTensorMapEncodeTiled, or null with the reason on stderr (`program` names the caller).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(char const *program) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  if (!fn || found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "%s: the driver has no cuTensorMapEncodeTiled\n", program);
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}
