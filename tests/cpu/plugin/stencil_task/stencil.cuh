// A user's own task (tests/cpu/plugin/test_stencil_task_bugs.py): a 3-row smoothing stencil,
// y[g] = (x[g-1] + x[g] + x[g+1]) / 3 with the edge rows clamped, in fp32. Grid x splits the rows,
// ROWS a task. Each output row needs the input rows just above and below it: with the input split like
// the output, those halo rows are the neighbouring tasks' (a dependency the spec must declare).
#pragma once

#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace user {
using namespace mpk;

// WHOLE: the input is declared whole() (it points at row 0), else split like the output (at row0).
template <typename T, int ROWS, int COLS, int TOTAL, bool WHOLE>
__device__ __forceinline__ void row_stencil(TaskDesc const &task, Runtime const &rt) {
  int const row0 = task.grid_idx[0] * ROWS;
  T const *x = task.input<T const>(0) + (WHOLE ? 0 : -static_cast<ptrdiff_t>(row0) * COLS);  // row 0
  T *y = task.output<T>(0);  // this task's ROWS rows
  for (int r = 0; r < ROWS; ++r) {
    int const g = row0 + r;
    T const *xr = x + static_cast<size_t>(g) * COLS;
    int const up = g > 0 ? -COLS : 0, down = g + 1 < TOTAL ? COLS : 0;
    for (int c = threadIdx.x; c < COLS; c += kWorkerThreads) {
      float const s = to_float(xr[up + c]) + to_float(xr[c]) + to_float(xr[down + c]);
      y[static_cast<size_t>(r) * COLS + c] = from_float<T>(s * (1.f / 3.f));
    }
  }
}

}  // namespace user
