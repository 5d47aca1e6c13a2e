// SiLU-and-multiply: y = silu(gate) * up, where this task's input slice is [gate | up] (COLS
// columns each) of every row: the layout a gate / up projection with interleaved weights
// (shuffle_tensors) produces. fp32 math, 16-byte accesses when the columns allow.
#pragma once
#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {

__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }

template <typename T, int BATCH, int COLS, int IN_STRIDE, int OUT_STRIDE>
__device__ __forceinline__ void silu_mul(TaskDesc const &task, Runtime const &rt) {
  T const *in = task.input<T const>(0);
  T *out = task.output<T>(0);
  int const rows = rt.active_rows(BATCH);
  constexpr int V = kVec16<T>;
  if constexpr (COLS % V == 0 && IN_STRIDE % V == 0 && OUT_STRIDE % V == 0) {
    constexpr int PER_ROW = COLS / V;
    for (int i = threadIdx.x; i < rows * PER_ROW; i += kWorkerThreads) {
      int const b = i / PER_ROW, c = (i % PER_ROW) * V;
      float g[V], u[V], y[V];
      load16(in + static_cast<size_t>(b) * IN_STRIDE + c, g);
      load16(in + static_cast<size_t>(b) * IN_STRIDE + COLS + c, u);
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = silu(g[k]) * u[k];
      store16(out + static_cast<size_t>(b) * OUT_STRIDE + c, y);
    }
  } else {
    for (int i = threadIdx.x; i < rows * COLS; i += kWorkerThreads) {
      int const b = i / COLS, c = i % COLS;
      T const *row = in + static_cast<size_t>(b) * IN_STRIDE;
      out[static_cast<size_t>(b) * OUT_STRIDE + c] = from_float<T>(silu(to_float(row[c])) * to_float(row[COLS + c]));
    }
  }
}

}  // namespace tasks
}  // namespace mpk
