// A user's own task (tests/cpu/plugin/test_scratch_task_bugs.py): each row rotated left by 32
// columns, y[r, c] = x[r, (c + 32) % COLS], staged through the layer's workspace in fp32. SHARED:
// every task stages in the same workspace row (the bug), else in row grid_idx[0] of its own.
#pragma once

#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace user {
using namespace mpk;

template <typename T, int ROWS, int COLS, int COUNT_FLOATS, bool SHARED>
__device__ __forceinline__ void rotate_rows(TaskDesc const &task, Runtime const &rt) {
  T const *x = task.input<T const>(0);
  float *ws = task.input<float>(1);  // the layer's workspace, after the declared inputs
  float *stage = ws + COUNT_FLOATS + (SHARED ? 0 : static_cast<size_t>(task.grid_idx[0]) * COLS);
  T *y = task.output<T>(0);
  if (threadIdx.x == 0) atomicAdd(reinterpret_cast<unsigned *>(ws), 1u);  // tasks run, over every launch
  for (int r = 0; r < ROWS; ++r) {
    for (int c = threadIdx.x; c < COLS; c += kWorkerThreads) stage[c] = to_float(x[static_cast<size_t>(r) * COLS + c]);
    __syncthreads();
    for (int c = threadIdx.x; c < COLS; c += kWorkerThreads)
      y[static_cast<size_t>(r) * COLS + c] = from_float<T>(stage[(c + 32) % COLS]);
    __syncthreads();  // every thread done with the stage before the next row overwrites it
  }
}

}  // namespace user
