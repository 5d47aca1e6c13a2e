// A user's own task (tests/cpu/plugin/test_scratch_task_bugs.py): each row rotated left by 32
// columns, y[r, c] = x[r, (c + 32) % COLS], staged in fp32. STAGE: kOwnRow stages in row grid_idx[0]
// of the layer's workspace (right); kSharedRow in the workspace row every task uses, and
// kDeviceVariable in a __device__ array every task uses (the bugs: the tasks of a layer run at once).
#pragma once

#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace user {
using namespace mpk;

enum Stage : int { kOwnRow, kSharedRow, kDeviceVariable };

__device__ float g_stage[4096];

template <typename T, int ROWS, int COLS, int COUNT_FLOATS, int STAGE>
__device__ __forceinline__ void rotate_rows(TaskDesc const &task, Runtime const &rt) {
  static_assert(COLS <= 4096, "a row fits g_stage");
  T const *x = task.input<T const>(0);
  float *ws = task.input<float>(1);  // the layer's workspace, after the declared inputs
  float *stage = STAGE == kDeviceVariable ? g_stage
                 : STAGE == kSharedRow    ? ws + COUNT_FLOATS
                                          : ws + COUNT_FLOATS + static_cast<size_t>(task.grid_idx[0]) * COLS;
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
