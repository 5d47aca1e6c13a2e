// Reductions across the kWorkerThreads threads of a worker CTA (task bodies): a warp_reduce per
// warp, then one value per warp through shared memory.
#pragma once
#include "primitives/warp.cuh"
#include "runtime/config.cuh"

namespace mpk {

// op over the v of all kWorkerThreads threads; every thread must call it and every thread gets the
// result. Two barriers, so back-to-back calls never race on the scratch.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op) {
  __shared__ T partial[kWorkerWarps];
  v = warp_reduce(v, op);
  if (threadIdx.x % kWarpSize == 0) partial[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  T r = partial[0];
#pragma unroll
  for (int w = 1; w < kWorkerWarps; ++w) r = op(r, partial[w]);
  __syncthreads();
  return r;
}

}  // namespace mpk
