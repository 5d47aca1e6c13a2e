// Embedding lookup: y[b, :] = W[tokens[b], :] for the active rows, this task's COLS columns of the
// table. A token id outside [0, VOCAB) stops the launch with MPK_TASK_ERROR_INDEX (never a read out
// of bounds, never a silent zero row).
#pragma once
#include <stdint.h>

#include "primitives/loads.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {

template <typename T, int BATCH, int VOCAB, int COLS, int W_STRIDE, int OUT_STRIDE>
__device__ __forceinline__ void embed(TaskDesc const &task, Runtime const &rt) {
  int64_t const *tokens = task.input<int64_t const>(0);
  T const *table = task.input<T const>(1);
  T *out = task.output<T>(0);
  int const rows = rt.active_rows(BATCH);
  constexpr int V = 16 / sizeof(T);
  constexpr bool kVector = COLS % V == 0 && W_STRIDE % V == 0 && OUT_STRIDE % V == 0;
  constexpr int UNITS = kVector ? COLS / V : COLS;
  for (int i = threadIdx.x; i < rows * UNITS; i += kWorkerThreads) {
    int const b = i / UNITS, u = i % UNITS;
    int64_t const tok = tokens[b];
    if (tok < 0 || tok >= VOCAB) {
      if (u == 0) rt.fail(task, MPK_TASK_ERROR_INDEX, tok);
      continue;
    }
    T const *src = table + tok * W_STRIDE;
    T *dst = out + static_cast<size_t>(b) * OUT_STRIDE;
    if constexpr (kVector)
      st_16(reinterpret_cast<uint4 *>(dst) + u, ld_16(reinterpret_cast<uint4 const *>(src) + u));
    else
      dst[u] = src[u];
  }
}

}  // namespace tasks
}  // namespace mpk
