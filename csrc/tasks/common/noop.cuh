// The minimal task, and the canonical example of the task contract: a template whose shapes are
// template parameters, called by every thread of a worker CTA with its descriptor.
//
// As a plain no-op it measures the runtime itself (dispatch, dependencies, termination). As a
// probe (PROBE = true, int32 slices) it writes into every element of its output slices one more
// than the largest element of its input slices: the task's depth in the graph. An unwritten input
// element (< 1) makes it write INT32_MIN instead, so the host can verify on the device that every
// task ran after all of its producers.
#pragma once
#include <stdint.h>

#include "primitives/block.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {

template <int NUM_INPUTS, int INPUT_LEN, int NUM_OUTPUTS, int OUTPUT_LEN, bool PROBE>
__device__ __forceinline__ void noop(TaskDesc const &task, Runtime const &) {
  static_assert(NUM_INPUTS <= MPK_MAX_INPUTS && NUM_OUTPUTS <= MPK_MAX_OUTPUTS,
                "a task descriptor carries at most 7 inputs and 3 outputs");
  if constexpr (PROBE) {
    int32_t deepest = 0;
    bool unwritten = false;
#pragma unroll
    for (int i = 0; i < NUM_INPUTS; ++i) {
      int32_t const *in = task.input<int32_t const>(i);
      for (int j = threadIdx.x; j < INPUT_LEN; j += kWorkerThreads) {
        int32_t const v = in[j];
        unwritten |= v < 1;
        deepest = max(deepest, v);
      }
    }
    deepest = block_reduce(deepest, MaxOp());
    int32_t const depth = __syncthreads_or(unwritten) ? INT32_MIN : deepest + 1;
#pragma unroll
    for (int o = 0; o < NUM_OUTPUTS; ++o) {
      int32_t *out = task.output<int32_t>(o);
      for (int j = threadIdx.x; j < OUTPUT_LEN; j += kWorkerThreads) out[j] = depth;
    }
  }
}

}  // namespace tasks
}  // namespace mpk
