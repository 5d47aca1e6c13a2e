// A user's own task that reads the meta tensors: for batch slot x (grid x = max_num_batched_requests),
// its new tokens are rows q0 = qo_indptr[x] .. qo_indptr[x + 1] - 1 of the (max_num_batched_tokens, C)
// input. Row q0 + i of `output` = input row * (i + 1) / n (n: the slot's new tokens); row x of `mean`
// (max_num_batched_requests, C, fp32) = the mean of the slot's rows; `sumsq[x]` (fp32) = the sum of
// squares of all the slot's elements (a shared-memory tree reduction). A slot without tokens writes
// nothing; rows of no token stay unwritten.
#pragma once
#include <math.h>

#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace user {
using namespace mpk;

template <typename T, int C>
constexpr unsigned ragged_scale_smem_bytes() {
  return kWorkerThreads * 4;
}

template <typename T, int C>
__device__ __forceinline__ void ragged_scale(TaskDesc const &task, Runtime const &rt) {
  int const x = task.grid_idx[0];
  int const q0 = rt.meta.qo_indptr[x];
  int const n = rt.meta.qo_indptr[x + 1] - q0;
  if (n <= 0) return;  // an unused slot (uniform over the CTA)
  T const *in = task.input<T const>(0);  // whole: (max_num_batched_tokens, C)
  T *out = task.output<T>(0);            // whole: this task picks its rows
  float *mean = task.output<float>(1);   // row x: (C,)
  float *sumsq = task.output<float>(2);  // element x
  float *red = reinterpret_cast<float *>(dynamic_smem);
  float const inv_n = 1.f / static_cast<float>(n);
  float part = 0.f;
  for (int c = threadIdx.x; c < C; c += kWorkerThreads) {
    float acc = 0.f;
    for (int i = 0; i < n; ++i) {
      size_t const at = static_cast<size_t>(q0 + i) * C + c;
      float const v = to_float(in[at]);
      acc += v;
      part += v * v;
      out[at] = from_float<T>(v * static_cast<float>(i + 1) * inv_n);
    }
    mean[c] = acc * inv_n;
  }
  red[threadIdx.x] = part;
  __syncthreads();  // every partial stored
  for (int s = kWorkerThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();  // this level done before the next reads it
  }
  if (threadIdx.x == 0) sumsq[0] = red[0];
}

}  // namespace user
