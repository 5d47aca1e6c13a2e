// Task bodies with one deliberate bug each, for the --mpk-sanitize demonstrations
// (tests/gpu/test_sanitize_demos_gpu.py registers them, in the scene file it writes, and nowhere
// else). Each copies its input slice (LEN int32) into its output slice, and then:
//   out_of_bounds   (memcheck)  thread 0 also writes 1 MiB past the end of its output slice;
//   racy            (racecheck) each thread reads a shared word another warp writes, without a barrier;
//   divergent_sync  (synccheck) odd and even threads of each warp wait at different barriers;
//   uninitialized   (initcheck) writes nothing: a later copy task reads its (never written) output;
//   copy            the plain copy, that later task.
#pragma once
#include <stdint.h>

#include "runtime/task_api.cuh"

namespace mpk {
namespace demos {

template <int LEN>
__device__ __forceinline__ void copy_slice(TaskDesc const &task) {
  int32_t const *in = task.input<int32_t>(0);
  int32_t *out = task.output<int32_t>(0);
  for (int j = threadIdx.x; j < LEN; j += kWorkerThreads) out[j] = in[j];
}

template <int LEN>
__device__ __forceinline__ void out_of_bounds(TaskDesc const &task, Runtime const &) {
  copy_slice<LEN>(task);
  if (threadIdx.x == 0) task.output<int32_t>(0)[LEN + (1 << 18)] = 1;
}

template <int LEN>
__device__ __forceinline__ void racy(TaskDesc const &task, Runtime const &) {
  static_assert(LEN >= 64, "the race is between warps 0 and 1");
  __shared__ int32_t staged[kWorkerThreads];
  int32_t const *in = task.input<int32_t>(0);
  int32_t *out = task.output<int32_t>(0);
  for (int base = 0; base < LEN; base += kWorkerThreads) {
    int const j = base + threadIdx.x;
    if (j < LEN) staged[threadIdx.x] = in[j];
    // The bug: no __syncthreads() here, so each thread reads the word the same lane of the
    // neighbouring warp writes, in whatever order the warps happen to run.
    int const other = threadIdx.x ^ 32;
    if (base + other < LEN && j < LEN) out[base + other] = staged[other];
    __syncthreads();
  }
}

template <int LEN>
__device__ __forceinline__ void divergent_sync(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x % 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  copy_slice<LEN>(task);
  __syncthreads();
}

template <int LEN>
__device__ __forceinline__ void uninitialized(TaskDesc const &, Runtime const &) {}

template <int LEN>
__device__ __forceinline__ void copy(TaskDesc const &task, Runtime const &) {
  copy_slice<LEN>(task);
}

}  // namespace demos
}  // namespace mpk
