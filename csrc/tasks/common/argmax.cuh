// Greedy sampling over a vocabulary split across tasks, in two layers:
//   argmax_partial: per active row, the largest logit of this task's COLS columns and its index;
//   argmax_reduce:  per active row, the best of the partials: the token written to output_tokens.
// Ties resolve to the lowest index and a NaN beats every number (as torch.argmax does), so the
// split cannot change the result.
#pragma once
#include <math.h>
#include <stdint.h>

#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {
namespace argmax_detail {

// Is (v, i) a better maximum than (bv, bi)?
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
  bool const vn = isnan(v), bn = isnan(bv);
  if (vn != bn) return vn;
  if (vn || v == bv) return i < bi;
  return v > bv;
}

__device__ __forceinline__ void warp_best(float &v, int64_t &i) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) {
    float const ov = __shfl_xor_sync(0xffffffffu, v, o);
    int64_t const oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// One warp per row at a time: the best of n (value, index) pairs given by at(j).
template <typename At>
__device__ __forceinline__ void row_best(int n, At at, float &best_v, int64_t &best_i) {
  best_v = -INFINITY;
  best_i = INT64_MAX;
  for (int j = threadIdx.x % kWarpSize; j < n; j += kWarpSize) {
    float v;
    int64_t i;
    at(j, v, i);
    if (better(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  warp_best(best_v, best_i);
}

}  // namespace argmax_detail

template <typename T, int BATCH, int COLS, int IN_STRIDE, int PARTS>
__device__ __forceinline__ void argmax_partial(TaskDesc const &task, Runtime const &rt) {
  T const *logits = task.input<T const>(0);
  float *values = task.output<float>(0);      // (BATCH, PARTS), this task writes column part
  int64_t *indices = task.output<int64_t>(1);  // same
  int const rows = rt.active_rows(BATCH);
  int64_t const col0 = static_cast<int64_t>(task.grid_idx[0]) * COLS;
  for (int b = threadIdx.x / kWarpSize; b < rows; b += kWorkerWarps) {
    T const *row = logits + static_cast<size_t>(b) * IN_STRIDE;
    float v;
    int64_t i;
    argmax_detail::row_best(
        COLS,
        [&](int j, float &fv, int64_t &fi) {
          fv = to_float(row[j]);
          fi = col0 + j;
        },
        v, i);
    if (threadIdx.x % kWarpSize == 0) {
      values[static_cast<size_t>(b) * PARTS] = v;
      indices[static_cast<size_t>(b) * PARTS] = i;
    }
  }
}

template <int BATCH, int ROWS, int PARTS>
__device__ __forceinline__ void argmax_reduce(TaskDesc const &task, Runtime const &rt) {
  float const *values = task.input<float const>(0);      // this task's ROWS rows of (BATCH, PARTS)
  int64_t const *indices = task.input<int64_t const>(1);
  int64_t *tokens = task.output<int64_t>(0);
  int const rows = min(ROWS, rt.active_rows(BATCH) - task.grid_idx[0] * ROWS);
  for (int b = threadIdx.x / kWarpSize; b < rows; b += kWorkerWarps) {
    float v;
    int64_t i;
    argmax_detail::row_best(
        PARTS,
        [&](int j, float &fv, int64_t &fi) {
          fv = values[static_cast<size_t>(b) * PARTS + j];
          fi = indices[static_cast<size_t>(b) * PARTS + j];
        },
        v, i);
    if (threadIdx.x % kWarpSize == 0) tokens[b] = i;
  }
}

}  // namespace tasks
}  // namespace mpk
