// A user's own task, for tests/cpu/plugin/test_user_task_bugs.py: y = softmax(x, dim=-1) over the
// rows of a (rows, cols) tensor, accumulated in fp32, one task per slice of ROWS rows (scalar 0: the
// tensor's rows; rows past the active tokens are skipped). The row is staged in dynamic shared
// memory, then each thread reduces a contiguous chunk of columns. The tests inject bugs by text.
#pragma once
#include <math.h>

#include "primitives/block.cuh"
#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace user {
using namespace mpk;

template <typename T, int ROWS, int COLS>
constexpr unsigned row_softmax_smem_bytes() {
  return ((COLS + kWorkerThreads - 1) / kWorkerThreads) * kWorkerThreads * 4;
}

template <typename T, int ROWS, int COLS>
__device__ __forceinline__ void row_softmax(TaskDesc const &task, Runtime const &rt) {
  constexpr int kPer = (COLS + kWorkerThreads - 1) / kWorkerThreads;  // a thread's contiguous chunk
  float *row = reinterpret_cast<float *>(dynamic_smem);
  T const *x = task.input<T const>(0);
  T *y = task.output<T>(0);
  int const live = min(ROWS, rt.active_rows(task.scalar_i(0)) - task.grid_idx[0] * ROWS);
  for (int r = 0; r < live; ++r) {
    T const *xr = x + static_cast<size_t>(r) * COLS;
    T *yr = y + static_cast<size_t>(r) * COLS;
    for (int c = threadIdx.x; c < COLS; c += kWorkerThreads) row[c] = to_float(xr[c]);
    __syncthreads();  // the row staged before any thread reads another's columns
    int const lo = threadIdx.x * kPer, hi = min(lo + kPer, COLS);
    float m = -INFINITY;
    for (int c = lo; c < hi; ++c) m = fmaxf(m, row[c]);
    m = block_reduce(m, MaxOp());
    float s = 0.f;
    for (int c = lo; c < hi; ++c) s += __expf(row[c] - m);
    s = block_reduce(s, SumOp());
    float const inv = 1.f / s;
    for (int c = threadIdx.x; c < COLS; c += kWorkerThreads) yr[c] = from_float<T>(__expf(row[c] - m) * inv);
  }
}

}  // namespace user
