// The combine step of an MoE block: out[t][c] = sum_j weights[t][j] * y[t][j][c] + residual[t][c]
// for the active tokens t, with y (tokens, TOPK, HIDDEN) from moe_w2_linear (row j: the token's
// j-th expert) and weights (tokens, TOPK) fp32 from the routing. This task's slices are COLS columns
// of y, residual and out (row strides HIDDEN); rows of inactive tokens are not written. fp32 sums,
// one rounding to T; 16-byte accesses when the columns allow.
#pragma once
#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {

template <typename T, int TOPK, int COLS, int HIDDEN>
__device__ __forceinline__ void moe_mul_sum_add(TaskDesc const &task, Runtime const &rt) {
  static_assert(TOPK >= 1 && COLS >= 1 && HIDDEN % COLS == 0,
                "moe_mul_sum_add: the grid cuts HIDDEN into COLS-wide slices");
  T const *y = task.input<T const>(0);
  float const *weights = task.input<float const>(1);
  T const *residual = task.input<T const>(2);
  T *out = task.output<T>(0);
  int const rows = rt.active_rows(task.scalar_i(0));
  constexpr int V = kVec16<T>;
  if constexpr (COLS % V == 0 && HIDDEN % V == 0) {
    constexpr int PER_ROW = COLS / V;
    for (int i = threadIdx.x; i < rows * PER_ROW; i += kWorkerThreads) {
      int const b = i / PER_ROW, c = (i % PER_ROW) * V;
      float acc[V], v[V];
      load16(residual + static_cast<size_t>(b) * HIDDEN + c, acc);
#pragma unroll
      for (int j = 0; j < TOPK; ++j) {
        float const wj = weights[b * TOPK + j];
        load16(y + (static_cast<size_t>(b) * TOPK + j) * HIDDEN + c, v);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += wj * v[k];
      }
      store16(out + static_cast<size_t>(b) * HIDDEN + c, acc);
    }
  } else {
    for (int i = threadIdx.x; i < rows * COLS; i += kWorkerThreads) {
      int const b = i / COLS, c = i % COLS;
      float acc = to_float(residual[static_cast<size_t>(b) * HIDDEN + c]);
      for (int j = 0; j < TOPK; ++j)
        acc += weights[b * TOPK + j] * to_float(y[(static_cast<size_t>(b) * TOPK + j) * HIDDEN + c]);
      out[static_cast<size_t>(b) * HIDDEN + c] = from_float<T>(acc);
    }
  }
}

}  // namespace tasks
}  // namespace mpk
