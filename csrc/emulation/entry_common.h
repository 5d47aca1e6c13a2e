// What every host-emulation module has in common (emulation/entry.h is what differs): the C ABI's
// structs and statuses, and the run of one task given the module's execute_task. The code of it,
// entry_common.cpp, is compiled once per arch and set of flags and linked into every module
// (mpk_runtime/build/host.py): it is most of a small module's compile time, and the same in all.
#pragma once
#include <stdint.h>

#include "emulation/block_runner.h"
#include "runtime/task_api.cuh"

// The most dynamic shared memory a task may ask for (an H100 CTA's 227 KB).
#define MPK_EMU_MAX_DYNAMIC_SMEM (227u << 10)

// Options of one run (mpk_runtime/run/host_runner.py mirrors it). Zeros are the defaults.
typedef struct MpkEmuOptions {
  int32_t order;         // mpk::emu::Order: 0 in order, 1 reversed, 2 shuffled by seed
  int32_t race_check;    // nonzero: check shared and global accesses (needs a race-checking build)
  uint64_t seed;
  int32_t num_threads;   // 0: kWorkerThreads
  int32_t check_slices;  // nonzero (with race_check): global accesses must fall in the slices below
  MpkEmuTensor const *tensors;  // every tensor the task may address, for reports and fault attribution
  int32_t num_tensors;
  int32_t num_readable;
  MpkEmuRange const *readable;  // sorted, disjoint: the task's input and output slices, the meta tensors
  MpkEmuRange const *writable;  // sorted, disjoint: its output slices
  int32_t num_writable;
  int32_t time_limit_s;  // > 0: a task still running after this many seconds is stopped as a hang
  char const *slices;  // the same in words ("reads x[0:2, 0:64]; writes y[0:2, 0:64]"), for reports
  // The task's Runtime: launch id (0 means 1, the first launch), iteration within the launch, and
  // over every launch of the kernel. A task that tags state with them sees a relaunch as on the GPU.
  uint32_t launch_id;
  uint32_t iteration;
  uint64_t absolute_iteration;
} MpkEmuOptions;

enum {
  MPK_EMU_OK = 0,
  MPK_EMU_TASK_ERROR = 1,  // the task called Runtime::fail; task_error[0..1]: code, value
  MPK_EMU_DETECTED = 2,    // the report says what the emulator found (race, divergent barrier, ...)
  MPK_EMU_INVALID = 3,     // the run could not start (the report says why)
};

#define MPK_EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace mpk {
namespace emu {

// A module's dispatcher: mpk::execute_task of its generated source.
using ExecuteTask = void (*)(uint32_t variant, TaskDesc const &task, Runtime const &rt);

// mpk_emu_run_task of a module whose dispatcher is `execute` and whose dynamic shared memory (the
// definition task_api.cuh's `extern __shared__` needs, per OS thread) is `smem`: defined in the
// module itself, so that the bodies address it as their own thread_local, not through a lookup.
int run_task(ExecuteTask execute, unsigned char *smem, size_t smem_capacity, uint32_t variant, void const *desc,
             MpkMeta const *meta, MpkBatchConfig const *batch, uint32_t dynamic_smem_bytes,
             MpkEmuOptions const *options, char *report, int report_len, long long *task_error);

// mpk_emu_prepare_next_batch of a module: the planner's warp runs with the module's shared memory
// (`smem` is in the module's thread-local block, which the block runner treats as shared).
int prepare_next_batch(unsigned char *smem, size_t smem_capacity, MpkMeta const *meta, MpkBatchConfig const *batch,
                       MpkBatchState const *state, MpkStatus *status, uint32_t iteration, int init, int *result,
                       char *report, int report_len);

}  // namespace emu
}  // namespace mpk
