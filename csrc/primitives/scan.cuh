// Prefix sums for task bodies: within a warp (shuffles, no shared memory) and across the
// kWorkerThreads threads of a worker CTA (a warp scan, then the warps' totals through shared
// memory). Used to compact run-time lists (the experts with tokens, the tokens of an expert) and
// to turn counts into offsets.
#pragma once
#include "runtime/config.cuh"

namespace mpk {

// Inclusive prefix sum over the lanes of a warp: lane i gets v(0) + ... + v(i). The whole warp must
// call it.
template <typename T>
__device__ __forceinline__ T warp_inclusive_sum(T v) {
  int const lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int o = 1; o < kWarpSize; o *= 2) {
    T const u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// Exclusive prefix sum over the CTA's threads in threadIdx order: thread i gets v(0) + ... + v(i-1),
// and every thread gets the sum of all in `total`. Every thread must call it. Two barriers, so
// back-to-back calls never race on the scratch; shared memory the caller wrote before the call is
// visible to every thread after it.
template <typename T>
__device__ __forceinline__ T block_exclusive_sum(T v, T &total) {
  __shared__ T warp_totals[kWorkerWarps];
  int const warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  T const inclusive = warp_inclusive_sum(v);
  if (lane == kWarpSize - 1) warp_totals[warp] = inclusive;
  __syncthreads();
  T before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kWorkerWarps; ++w) {
    T const s = warp_totals[w];
    before += w < warp ? s : T(0);
    all += s;
  }
  __syncthreads();
  total = all;
  return before + inclusive - v;
}

}  // namespace mpk
