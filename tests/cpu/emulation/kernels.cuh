// Correct kernels for the host emulation tests: each writes what it observed to its output 0
// (uint32 words, laid out as test_semantics.py expects), and none has a race, so a race-checking
// build must report nothing for any of them.
#pragma once
#include <stdint.h>

#include "primitives/block.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace test {

constexpr unsigned kFull = 0xffffffffu;

// out[k * N + tid]: 0: the neighbour's value seen across a barrier; 1: __syncthreads_count(tid % 3 == 0);
// 2: _and(true); 3: _and(tid != 5); 4: _or(tid == 77); 5: _or(false); 6: block_reduce sum of tid;
// 7: block_reduce max of (tid * 7) % 101; 8: a second static __shared__ array, distinct from the first.
__device__ void barriers(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads;
  uint32_t *out = task.output<uint32_t>(0);
  __shared__ uint32_t s[N];
  __shared__ uint32_t other[N];
  int const t = threadIdx.x;
  s[t] = t;
  other[t] = 1000 + t;
  __syncthreads();
  out[0 * N + t] = s[(t + 1) % N];
  out[1 * N + t] = __syncthreads_count(t % 3 == 0);
  out[2 * N + t] = __syncthreads_and(1);
  out[3 * N + t] = __syncthreads_and(t != 5);
  out[4 * N + t] = __syncthreads_or(t == 77);
  out[5 * N + t] = __syncthreads_or(0);
  out[6 * N + t] = block_reduce(static_cast<uint32_t>(t), SumOp());
  out[7 * N + t] = block_reduce(static_cast<uint32_t>(t * 7 % 101), MaxOp());
  out[8 * N + t] = other[N - 1 - t];
}

// Dynamic shared memory: two floats a thread, read back reversed across a barrier.
__device__ void dynamic_shared(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads;
  float *out = task.output<float>(0);
  float *d = reinterpret_cast<float *>(dynamic_smem);
  int const t = threadIdx.x;
  d[t] = t + 0.5f;
  d[N + t] = -t;
  __syncthreads();
  out[t] = d[N - 1 - t];
  out[N + t] = d[2 * N - 1 - t];
}

// Every shuffle at every width; v = 10 * tid + 1. out[k * N + tid] in the order below.
__device__ void shuffles(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads;
  uint32_t *out = task.output<uint32_t>(0);
  int const t = threadIdx.x, lane = t % 32;
  int const v = 10 * t + 1;
  int k = 0;
  for (int w = 1; w <= 32; w *= 2) {
    out[k++ * N + t] = __shfl_sync(kFull, v, lane * 3 + 1, w);
    out[k++ * N + t] = __shfl_up_sync(kFull, v, 3, w);
    out[k++ * N + t] = __shfl_down_sync(kFull, v, 3, w);
    out[k++ * N + t] = __shfl_xor_sync(kFull, v, 5, w);
    out[k++ * N + t] = __shfl_xor_sync(kFull, v, 16, w);
  }
  out[k++ * N + t] = __shfl_sync(kFull, v, 7);        // 30: default width
  out[k++ * N + t] = __shfl_down_sync(kFull, v, 1);   // 31
  int64_t const big = (static_cast<int64_t>(t) << 40) | t;
  int64_t const got = __shfl_down_sync(kFull, big, 1);  // 32, 33: 8 bytes
  out[k++ * N + t] = static_cast<uint32_t>(got);
  out[k++ * N + t] = static_cast<uint32_t>(got >> 40);
  double const dv = __shfl_xor_sync(kFull, t + 0.5, 2);  // 34: a double, as 2 * value
  out[k++ * N + t] = static_cast<uint32_t>(2 * dv);
  __nv_bfloat16 const h = __shfl_sync(kFull, __float2bfloat16(static_cast<float>(lane)), 31);  // 35: 2 bytes
  out[k++ * N + t] = static_cast<uint32_t>(__bfloat162float(h));
  uint32_t partial = 0;  // 36: lanes 0-15 alone
  if (lane < 16) partial = __shfl_xor_sync(0x0000ffffu, v, 1);
  out[k++ * N + t] = partial;
}

// out[k * N + tid]: 0: ballot(lane % 3 == 0); 1: any(tid == 37); 2: all(lane < 32); 3: all(lane != 4);
// 4: ballot of odd lanes among lanes 16-31 (mask 0xffff0000; 0 for lanes 0-15); 5: __syncwarp passed.
__device__ void votes(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads;
  uint32_t *out = task.output<uint32_t>(0);
  int const t = threadIdx.x, lane = t % 32;
  out[0 * N + t] = __ballot_sync(kFull, lane % 3 == 0);
  out[1 * N + t] = __any_sync(kFull, t == 37);
  out[2 * N + t] = __all_sync(kFull, lane < 32);
  out[3 * N + t] = __all_sync(kFull, lane != 4);
  out[4 * N + t] = lane >= 16 ? __ballot_sync(0xffff0000u, lane & 1) : 0u;
  __syncwarp();
  if (lane < 8) __syncwarp(0xffu);
  out[5 * N + t] = 1;
}

// Shared and global atomics from every thread. out[0..]: see test_semantics.py.
__device__ void atomics(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads;
  uint32_t *out = task.output<uint32_t>(0);
  unsigned long long *g = task.output<unsigned long long>(1);
  __shared__ int add;
  __shared__ float fadd;
  __shared__ unsigned umax, umin, bits_or, bits_and, bits_xor, inc, cas;
  __shared__ long long smax;
  __shared__ int exch;
  int const t = threadIdx.x;
  if (t == 0) {
    add = 0;
    fadd = 0.f;
    umax = 0;
    umin = ~0u;
    bits_or = 0;
    bits_and = ~0u;
    bits_xor = 0;
    inc = 0;
    cas = 0;
    smax = -1;
    exch = -1;
  }
  __syncthreads();
  atomicAdd(&add, 2);
  atomicSub(&add, 1);
  atomicAdd(&fadd, 0.5f);
  atomicMax(&umax, static_cast<unsigned>(t * 7 % 101));
  atomicMin(&umin, static_cast<unsigned>(t * 7 % 101 + 3));
  atomicOr(&bits_or, 1u << (t % 32));
  atomicAnd(&bits_and, ~(1u << (t % 16)));
  atomicXor(&bits_xor, static_cast<unsigned>(t));
  atomicInc(&inc, 9u);  // wraps to 0 after 9
  atomicMax(&smax, static_cast<long long>(t) << 33);
  atomicCAS(&cas, static_cast<unsigned>(t), static_cast<unsigned>(t + 1));  // in order: every one succeeds
  out[16 + t] = static_cast<uint32_t>(atomicExch(&exch, t));  // the previous holder, in run order
  atomicAdd(g, static_cast<unsigned long long>(t));
  atomicMax(g + 1, static_cast<unsigned long long>(t) << 32);
  __syncthreads();
  if (t == 0) {
    out[0] = add;
    out[1] = static_cast<uint32_t>(fadd * 2);
    out[2] = umax;
    out[3] = umin;
    out[4] = bits_or;
    out[5] = bits_and;
    out[6] = bits_xor;
    out[7] = inc;
    out[8] = static_cast<uint32_t>(smax >> 33);
    out[9] = cas;
    out[10] = exch;
  }
}

// Lanes of one warp exchange through shared memory, ordered by __syncwarp: no race.
__device__ void warp_synced(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  __shared__ uint32_t s[kWorkerThreads];
  int const t = threadIdx.x;
  s[t] = 3 * t;
  __syncwarp();
  out[t] = s[t ^ 1];
}

// A __shared__ array of bf16 and one of half, each written by every thread and read across a
// barrier: no finding. (Here __shared__ is thread_local, and g++ guards such an array of a class type
// with an init flag every thread touches; the checker had reported that flag as a race and as
// uninitialized shared memory.)
__device__ void shared_bf16_tile(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  __shared__ __nv_bfloat16 tile[kWorkerThreads];
  __shared__ __half halves[kWorkerThreads];
  int const t = threadIdx.x;
  tile[t] = __float2bfloat16(static_cast<float>(t));
  halves[t] = __float2half(static_cast<float>(2 * t));
  __syncthreads();
  int const u = (t + 1) % kWorkerThreads;
  out[t] = static_cast<uint32_t>(__bfloat162float(tile[u]) + __half2float(halves[u]));
}

// Two pipelines of two warps each pass rounds through shared memory, each ordered by its own named
// barrier and with its own number of rounds (3 and 5: __syncthreads could not order them). Then
// warp 0's words reach warp 2 through warp 1, by two named barriers. out[r * N + tid], r < 5: the
// partner's word of round r (0 past a pipeline's last round); out[5 * N + tid]: for warp 2, a word
// warp 0 wrote.
__device__ void named_barriers(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads, P = N / 2;
  uint32_t *out = task.output<uint32_t>(0);
  __shared__ uint32_t s[N];
  int const t = threadIdx.x, pipe = t / P, rounds = pipe == 0 ? 3 : 5;
  for (int r = 0; r < 5; ++r) out[r * N + t] = 0;
  for (int r = 0; r < rounds; ++r) {
    s[t] = 1000 * r + t;
    named_barrier_sync(1 + pipe, P);
    out[r * N + t] = s[pipe * P + (t + 1) % P];
    named_barrier_sync(1 + pipe, P);  // the words are read before the next round writes them
  }
  __syncthreads();
  int const warp = t / 32;
  if (warp == 0) s[t] = 7 * t;
  if (warp <= 1) named_barrier_sync(3, 64);
  if (warp == 1 || warp == 2) named_barrier_sync(4, 64);
  out[5 * N + t] = warp == 2 ? s[t - 64] : 0;
}

// A count that outlives the launch: a __device__ variable (emulated: a global of the host module).
__device__ int launch_count;
__device__ void counts_launches(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x == 0) task.output<int>(0)[0] = ++launch_count;
}

// What the task's Runtime says of the launch: its id, the iteration within it and over every launch.
__device__ void runtime_view(TaskDesc const &task, Runtime const &rt) {
  if (threadIdx.x == 0) {
    long long *out = task.output<long long>(0);
    out[0] = rt.launch_id, out[1] = rt.iteration, out[2] = static_cast<long long>(rt.absolute_iteration);
  }
}

// A task that reports an error (Runtime::fail), as embed does for a token out of range.
__device__ void task_error(TaskDesc const &task, Runtime const &rt) {
  if (threadIdx.x == 3) rt.fail(task, MPK_TASK_ERROR_INDEX, 42);
}

}  // namespace test
}  // namespace mpk
