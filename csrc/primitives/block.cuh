// Reductions across the kWorkerThreads threads of a worker CTA (task bodies): a warp_reduce per
// warp, then one value per warp through shared memory.
#pragma once
#include "primitives/warp.cuh"
#include "runtime/config.cuh"

namespace mpk {

// bar.sync id, threads: waits until `threads` threads (whole warps: a multiple of 32) wait at named
// barrier `id` (1 to 15; 0 is __syncthreads'), then orders their memory accesses before it before
// theirs after it. Only those threads wait: groups of warps (pipelines) synchronize on their own.
// Every thread of a group must pass its barriers in the same order, with the same count.
#ifdef MPK_HOST_EMULATION
__device__ __forceinline__ void named_barrier_sync(int id, int threads, char const *file = __builtin_FILE(),
                                                   int line = __builtin_LINE()) {
  ::mpk::emu::named_barrier(::mpk::emu::Site{file, line}, id, threads);
}
#else
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

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
