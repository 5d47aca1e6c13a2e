// RMSNorm over rows: y = x * rsqrt(mean(x^2) + eps) * w, accumulated in fp32, one task per slice
// of ROWS consecutive rows (scalar 1: the tensor's rows; those past the iteration's active tokens
// are skipped). Written against kWorkerThreads, so the same body serves the sm80 path
// (128 threads) and the sm90 / sm100 paths (256 threads). Memory bound: 16-byte accesses, and the
// row stays in registers between the reduction and the scaling when it fits (8 vectors a thread).
#pragma once
#include "primitives/block.cuh"
#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {

template <typename T, int ROWS, int HIDDEN>
__device__ __forceinline__ void rmsnorm(TaskDesc const &task, Runtime const &rt) {
  static_assert(ROWS >= 1 && HIDDEN >= 1, "rmsnorm needs at least one row of at least one element");
  constexpr int V = kVec16<T>;
  constexpr bool kVector = HIDDEN % V == 0;  // rows then start 16-byte aligned, too
  constexpr int kChunks = kVector ? HIDDEN / V : HIDDEN;
  constexpr int kPerThread = (kChunks + kWorkerThreads - 1) / kWorkerThreads;
  constexpr bool kKeepRow = kVector && kPerThread <= 8;

  T const *x = task.input<T const>(0);
  T const *w = task.input<T const>(1);
  T *y = task.output<T>(0);
  float const eps = task.scalar_f(0);
  int const live = min(ROWS, rt.active_rows(task.scalar_i(1)) - task.grid_idx[0] * ROWS);

  for (int r = 0; r < live; ++r) {
    T const *xr = x + static_cast<size_t>(r) * HIDDEN;
    T *yr = y + static_cast<size_t>(r) * HIDDEN;
    float ss = 0.f;
    if constexpr (kKeepRow) {
      float v[kPerThread][V];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        int const c = threadIdx.x + i * kWorkerThreads;
        if (c < kChunks) {
          load16(xr + c * V, v[i]);
#pragma unroll
          for (int k = 0; k < V; ++k) ss += v[i][k] * v[i][k];
        }
      }
      float const scale = rsqrtf(block_reduce(ss, SumOp()) / HIDDEN + eps);
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        int const c = threadIdx.x + i * kWorkerThreads;
        if (c < kChunks) {
          float wv[V], o[V];
          load16(w + c * V, wv);
#pragma unroll
          for (int k = 0; k < V; ++k) o[k] = v[i][k] * scale * wv[k];
          store16(yr + c * V, o);
        }
      }
    } else {
      for (int c = threadIdx.x; c < HIDDEN; c += kWorkerThreads) {
        float const v = to_float(xr[c]);
        ss += v * v;
      }
      float const scale = rsqrtf(block_reduce(ss, SumOp()) / HIDDEN + eps);
      for (int c = threadIdx.x; c < HIDDEN; c += kWorkerThreads)
        yr[c] = from_float<T>(to_float(xr[c]) * scale * to_float(w[c]));
    }
  }
}

}  // namespace tasks
}  // namespace mpk
