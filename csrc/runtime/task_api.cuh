// What a task body sees: its descriptor (pointers to its slices, scalars, grid index) and the
// runtime view (meta tensors of the current iteration). Task bodies are blockIdx-agnostic: every
// per-task fact comes from the descriptor.
//
// The contract, by example (csrc/tasks/common/noop.cuh is the minimal task):
//
//   template <typename T, int ROWS>
//   __device__ __forceinline__ void my_task(mpk::TaskDesc const &task, mpk::Runtime const &rt) {
//     T const *x = task.input<T>(0);  // this task's slice of its first input
//     T *y = task.output<T>(0);
//     for (int i = threadIdx.x; i < ROWS; i += mpk::kWorkerThreads) ...
//   }
//
// All kWorkerThreads threads of the worker call the body; the runtime synchronizes the CTA
// before and after it, so a body needs no trailing __syncthreads().
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <initializer_list>

#include "runtime/abi.h"
#include "runtime/config.cuh"
#include "runtime/profiler.cuh"

namespace mpk {

struct TaskDesc : MpkTaskDesc {
  template <typename T>
  __device__ __forceinline__ T *input(int i) const {
    return static_cast<T *>(inputs[i]);
  }
  template <typename T>
  __device__ __forceinline__ T *output(int i) const {
    return static_cast<T *>(outputs[i]);
  }
  __device__ __forceinline__ float scalar_f(int i) const { return scalars[i].f; }
  __device__ __forceinline__ int32_t scalar_i(int i) const { return scalars[i].i; }
};
static_assert(sizeof(TaskDesc) == sizeof(MpkTaskDesc), "TaskDesc must only add methods");
static_assert(sizeof(MpkTaskDesc) == 128, "a task descriptor is 128 bytes (8 x 16-byte copies)");

struct Runtime {
  MpkMeta const &meta;
  MpkBatchConfig const &batch;
  MpkControl *control;
  uint32_t launch_id;
  uint32_t iteration;  // within this launch
  // For cross-rank tasks (runtime/comm.cuh): the iteration counted over every launch of the kernel
  // (the same on every rank), the worker's status slot (for the watchdog's record) and the ranks'
  // heaps. A task body launched alone (task_body.cuh) has neither status nor heaps.
  unsigned long long absolute_iteration = 0;
  MpkWorkerStatus *status = nullptr;
  MpkComm const *comm = nullptr;
  // The worker's profiler recorder in a profiled launch, else null (and mark() does nothing).
  profiler::Recorder *recorder = nullptr;

  // Profiling: ends phase `phase` of the running task's body. The trace shows phase k as the time
  // from mark k - 1 (or the task's begin) to mark k, and the rest up to the task's end as one more
  // phase; the TaskSpec's `phases` names them. Thread 0 records, so a mark placed after a barrier
  // times the whole CTA's phase. In a launch without a profiler tensor it costs a compare.
  __device__ __forceinline__ void mark(uint32_t phase) const {
    if (recorder != nullptr && threadIdx.x == 0) recorder->record(MPK_PROF_TASK_MARK, phase, iteration);
  }

  // Report that this task cannot compute its outputs (e.g. MPK_TASK_ERROR_INDEX and the bad index).
  // The first report of a launch wins; at the end of the iteration the controller stops the launch
  // and the host raises a KernelError that names the task. Any thread may call it.
  __device__ __forceinline__ void fail(TaskDesc const &task, int32_t code, long long value) const {
    if (atomicCAS(&control->task_error_launch, 0u, launch_id) == 0u) {
      control->task_error_task = task.task_id;
      control->task_error_code = code;
      control->task_error_value = value;
      __threadfence();
    }
  }

  // Tokens of the current iteration (written by prepare_next_batch before the iteration starts).
  __device__ __forceinline__ int32_t num_active_tokens() const { return *meta.num_new_tokens; }

  // Rows of a token dimension with `rows` rows that this iteration uses: a dimension of
  // max_num_batched_tokens rows holds the batch, of which only num_active_tokens() rows are live;
  // any other size is not a token batch and is used whole. (mpk_runtime/emulator.py applies the
  // same rule to the TaskSpec.token_dims of every task.)
  __device__ __forceinline__ int32_t active_rows(int32_t rows) const {
    return rows == batch.max_num_batched_tokens ? min(rows, num_active_tokens()) : rows;
  }
};

// The largest of some sizes, at compile time (the generated kDynamicSmemBytes uses it).
constexpr unsigned max_of(std::initializer_list<unsigned> sizes) {
  unsigned m = 0;
  for (unsigned s : sizes) m = s > m ? s : m;
  return m;
}

// Dynamic shared memory of the worker CTA, sized by the build for the hungriest variant.
extern __shared__ __align__(128) unsigned char dynamic_smem[];

// Generated per graph (codegen.py): one case per template instantiation (variant) the graph uses.
// The worker passes the variant in a register, read before the task's dependency resolved.
__device__ __forceinline__ void execute_task(uint32_t variant, TaskDesc const &task, Runtime const &rt);

}  // namespace mpk

// Last: it redefines __syncthreads() for the task bodies and the runtime included after this header.
#include "runtime/warp_jitter.cuh"
