// Reductions across the kWorkerThreads threads of a worker CTA, for task bodies.
#pragma once
#include "runtime/task_api.cuh"

namespace mpk {

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread gets the result. Two barriers, so back-to-back calls never race on the scratch.
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
