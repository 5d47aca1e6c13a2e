// SiLU-and-multiply of an MoE block's gate / up rows: y[r][c] = silu(x[r][c]) * x[r][INTER + c] for
// the rows (token, slot) of the active tokens, where x is (tokens, TOPK, 2 * INTER) as
// moe_w13_linear writes it ([gate | up], not grouped) and y is (tokens, TOPK, INTER). This task's
// output slice is COLS columns starting at grid x * COLS; its input pointer is the whole x. Rows of
// inactive tokens are not written. fp32 math, 16-byte accesses when the columns allow.
#pragma once
#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"
#include "tasks/common/silu_mul.cuh"

namespace mpk {
namespace tasks {

template <typename T, int TOPK, int COLS, int INTER>
__device__ __forceinline__ void moe_silu_mul(TaskDesc const &task, Runtime const &rt) {
  static_assert(TOPK >= 1 && COLS >= 1 && INTER % COLS == 0, "moe_silu_mul: the grid cuts INTER into COLS-wide slices");
  int const c0 = task.grid_idx[0] * COLS;
  T const *in = task.input<T const>(0) + c0;
  T *out = task.output<T>(0);
  int const rows = rt.active_rows(task.scalar_i(0)) * TOPK;  // (token, slot) rows
  constexpr int V = kVec16<T>;
  if constexpr (COLS % V == 0 && INTER % V == 0) {
    constexpr int PER_ROW = COLS / V;
    for (int i = threadIdx.x; i < rows * PER_ROW; i += kWorkerThreads) {
      int const r = i / PER_ROW, c = (i % PER_ROW) * V;
      float g[V], u[V], y[V];
      load16(in + static_cast<size_t>(r) * 2 * INTER + c, g);
      load16(in + static_cast<size_t>(r) * 2 * INTER + INTER + c, u);
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = silu(g[k]) * u[k];
      store16(out + static_cast<size_t>(r) * INTER + c, y);
    }
  } else {
    for (int i = threadIdx.x; i < rows * COLS; i += kWorkerThreads) {
      int const r = i / COLS, c = i % COLS;
      T const *row = in + static_cast<size_t>(r) * 2 * INTER;
      out[static_cast<size_t>(r) * INTER + c] = from_float<T>(silu(to_float(row[c])) * to_float(row[INTER + c]));
    }
  }
}

}  // namespace tasks
}  // namespace mpk
