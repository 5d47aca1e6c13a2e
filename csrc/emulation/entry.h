// The C ABI of a host-emulation module: what runtime/persistent_kernel.cuh includes in place of the
// kernel when a generated dispatcher is built for the host (-DMPK_HOST_EMULATION,
// mpk_runtime/build/host.py). It runs one task, mpk::execute_task(variant, desc, rt), as one block
// of kWorkerThreads fibers (emulation/block_runner.h), and the device's prepare_next_batch
// (runtime/prepare_next_batch.cuh) as the controller warp would, and says how that went. Loaded from
// Python with ctypes (mpk_runtime/run/host_runner.py).
#pragma once
#include <stdio.h>
#include <string.h>

#include <string>

#include "emulation/block_runner.h"
#include "runtime/prepare_next_batch.cuh"
#include "runtime/task_api.cuh"

// The most dynamic shared memory a task may ask for (an H100 CTA's 227 KB).
#define MPK_EMU_MAX_DYNAMIC_SMEM (227u << 10)

namespace mpk {

// The definition task_api.cuh's `extern __shared__` declaration needs: per OS thread, like every
// __shared__ variable here (see emulation/cuda_shim.h).
thread_local __align__(128) unsigned char dynamic_smem[MPK_EMU_MAX_DYNAMIC_SMEM];
static_assert(kDynamicSmemBytes <= MPK_EMU_MAX_DYNAMIC_SMEM, "a variant asks for more shared memory than a CTA has");

namespace emu {

#ifdef __SANITIZE_THREAD__
constexpr bool kRaceCheckBuilt = true;  // -fsanitize=thread: every access calls race_check.cpp
#else
constexpr bool kRaceCheckBuilt = false;
#endif

// What the emulator owns of one task's run: the task reads its descriptor and runtime view, and
// Runtime::fail writes control. One object, so that slice checking exempts it in one comparison.
struct TaskFrame {
  TaskDesc task;
  MpkMeta meta;
  MpkBatchConfig batch;
  MpkControl control;
  uint32_t variant;
  uint32_t launch_id, iteration;  // what a worker's Runtime holds (runtime/worker.cuh)
  unsigned long long absolute_iteration;
};

inline void run_task_thread(void *p) {
  auto &f = *static_cast<TaskFrame *>(p);
  Runtime const rt{f.meta, f.batch, &f.control, f.launch_id, f.iteration, f.absolute_iteration};
  execute_task(f.variant, f.task, rt);
}

// The controller warp's part of the iteration protocol (runtime/scheduler.cuh): the whole warp
// initialises the batching state, then lane 0 plans the batch.
struct PlanFrame {
  batching::Planner const *planner;
  uint32_t iteration;
  int init;
  int result;
};

inline void plan_thread(void *p) {
  auto &f = *static_cast<PlanFrame *>(p);
  int const lane = static_cast<int>(threadIdx.x);
  if (f.init) f.planner->init(lane);
  if (lane == 0) f.result = f.planner->prepare_next_batch(f.iteration);
}

}  // namespace emu
}  // namespace mpk

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

MPK_EMU_EXPORT int mpk_abi_version(void) { return MPK_ABI_VERSION; }
MPK_EMU_EXPORT int mpk_worker_threads(void) { return mpk::kWorkerThreads; }
MPK_EMU_EXPORT int mpk_target_sm(void) { return mpk::kTargetSm; }
MPK_EMU_EXPORT unsigned mpk_dynamic_smem_bytes(void) { return mpk::kDynamicSmemBytes; }
MPK_EMU_EXPORT char const *mpk_task_type_name(int opcode) { return mpk::task_type_name(opcode); }
MPK_EMU_EXPORT int mpk_emu_race_check_built(void) { return mpk::emu::kRaceCheckBuilt; }
MPK_EMU_EXPORT double mpk_emu_switch_ns(int n) { return mpk::emu::measure_switch_ns(n); }
MPK_EMU_EXPORT void mpk_emu_release_stacks(void) { mpk::emu::release_stacks(); }
MPK_EMU_EXPORT void *mpk_emu_guarded_alloc(size_t bytes) { return mpk::emu::guarded_alloc(bytes); }
MPK_EMU_EXPORT void mpk_emu_guarded_free(void *p, size_t bytes) { mpk::emu::guarded_free(p, bytes); }

// The structs Python fills in, in mpk_abi_layout's "Struct=size field:offset ...;..." format.
MPK_EMU_EXPORT int mpk_emu_layout(char *buf, int len) {
  return snprintf(buf, len,
                  "MpkTaskDesc=%zu variant:%zu task_id:%zu grid_idx:%zu scalars:%zu inputs:%zu outputs:%zu;"
                  "MpkMeta=%zu tokens:%zu paged_kv_last_page_len:%zu;"
                  "MpkBatchConfig=%zu total_num_requests:%zu test_mode:%zu eos_token_id:%zu;"
                  "MpkBatchState=%zu running:%zu page_queue:%zu counters:%zu;"
                  "MpkStatus=%zu code:%zu detail:%zu",
                  sizeof(MpkTaskDesc), offsetof(MpkTaskDesc, variant), offsetof(MpkTaskDesc, task_id),
                  offsetof(MpkTaskDesc, grid_idx), offsetof(MpkTaskDesc, scalars), offsetof(MpkTaskDesc, inputs),
                  offsetof(MpkTaskDesc, outputs), sizeof(MpkMeta), offsetof(MpkMeta, tokens),
                  offsetof(MpkMeta, paged_kv_last_page_len), sizeof(MpkBatchConfig),
                  offsetof(MpkBatchConfig, total_num_requests), offsetof(MpkBatchConfig, test_mode),
                  offsetof(MpkBatchConfig, eos_token_id), sizeof(MpkBatchState), offsetof(MpkBatchState, running),
                  offsetof(MpkBatchState, page_queue), offsetof(MpkBatchState, counters), sizeof(MpkStatus),
                  offsetof(MpkStatus, code), offsetof(MpkStatus, detail));
}

namespace mpk {
namespace emu {

inline RunConfig run_config(MpkEmuOptions const &opt, uint32_t task_id, uint32_t dynamic_smem_bytes) {
  RunConfig cfg{};
  cfg.num_threads = opt.num_threads ? opt.num_threads : kWorkerThreads;
  cfg.order = opt.order;
  cfg.seed = opt.seed;
  cfg.race_check = opt.race_check != 0;
  cfg.time_limit_s = opt.time_limit_s;
  cfg.task_id = task_id;
  cfg.dynamic_smem = dynamic_smem;
  cfg.dynamic_smem_capacity = sizeof dynamic_smem;
  cfg.dynamic_smem_bytes = dynamic_smem_bytes;
  Memory &m = cfg.memory;
  m.tensors = opt.tensors;
  m.num_tensors = opt.num_tensors;
  m.readable = opt.readable;
  m.num_readable = opt.num_readable;
  m.writable = opt.writable;
  m.num_writable = opt.num_writable;
  m.check_slices = opt.check_slices != 0;
  m.slices = opt.slices ? opt.slices : "";
  return cfg;
}

inline int run_status(int r) {
  return r == kRunOk ? MPK_EMU_OK : r == kRunDetected ? MPK_EMU_DETECTED : MPK_EMU_INVALID;
}

inline void copy_report(std::string const &text, char *report, int report_len) {
  if (report && report_len > 0) snprintf(report, report_len, "%s", text.c_str());
}

}  // namespace emu
}  // namespace mpk

// Runs one task: `desc` is its 128-byte MpkTaskDesc, meta / batch the iteration's view.
// Returns MPK_EMU_*; `report` (NUL-terminated, truncated to report_len) says what went wrong.
MPK_EMU_EXPORT int mpk_emu_run_task(uint32_t variant, void const *desc, MpkMeta const *meta,
                                    MpkBatchConfig const *batch, uint32_t dynamic_smem_bytes,
                                    MpkEmuOptions const *options, char *report, int report_len, long long *task_error) {
  using namespace mpk::emu;
  MpkEmuOptions const opt = options ? *options : MpkEmuOptions{};
  TaskFrame frame;
  memset(static_cast<void *>(&frame), 0, sizeof frame);
  memcpy(static_cast<void *>(&frame.task), desc, sizeof frame.task);
  frame.meta = *meta;
  frame.batch = *batch;
  frame.variant = variant;
  frame.launch_id = opt.launch_id ? opt.launch_id : 1u;
  frame.iteration = opt.iteration;
  frame.absolute_iteration = opt.absolute_iteration;
  RunConfig cfg = run_config(opt, frame.task.task_id, dynamic_smem_bytes);
  clear_atomic_words();
  cfg.memory.host_lo = reinterpret_cast<uintptr_t>(&frame);
  cfg.memory.host_hi = cfg.memory.host_lo + sizeof frame;
  std::string text;
  int status;
  if (cfg.race_check && !kRaceCheckBuilt) {
    text = "race checking was asked of a module built without it (build with race_check=True)";
    status = MPK_EMU_INVALID;
  } else if (cfg.memory.check_slices && !cfg.race_check) {
    text = "slice checking needs race checking (the hooks of a race-checking build see every access)";
    status = MPK_EMU_INVALID;
  } else {
    status = run_status(run_block(cfg, &run_task_thread, &frame, text));
  }
  if (status == MPK_EMU_OK && frame.control.task_error_launch == frame.launch_id) {
    status = MPK_EMU_TASK_ERROR;
    text = "task " + std::to_string(frame.control.task_error_task) + " reported error " +
           std::to_string(frame.control.task_error_code) + " (value " + std::to_string(frame.control.task_error_value) +
           ")";
    if (task_error) {
      task_error[0] = frame.control.task_error_code;
      task_error[1] = frame.control.task_error_value;
    }
  }
  copy_report(text, report, report_len);
  return status;
}

// The words the last mpk_emu_run_task updated atomically: fills up to `max` (address, bytes) pairs,
// returns how many there are.
MPK_EMU_EXPORT int mpk_emu_atomic_words(uint64_t *addrs, uint32_t *bytes, int max) {
  return static_cast<int>(mpk::emu::copy_atomic_words(addrs, bytes, max > 0 ? static_cast<size_t>(max) : 0));
}

// Runs the device's prepare_next_batch on `state` (the MpkBatchState of a launch, host memory) as
// the controller warp does: with `init`, the whole warp first resets the batching state (the start
// of a launch). `*result`: 1 a batch is ready, 0 stop, -1 error (status->code says which).
MPK_EMU_EXPORT int mpk_emu_prepare_next_batch(MpkMeta const *meta, MpkBatchConfig const *batch,
                                              MpkBatchState const *state, MpkStatus *status, uint32_t iteration,
                                              int init, int *result, char *report, int report_len) {
  using namespace mpk::emu;
  mpk::batching::Planner const planner{*meta, *batch, *state, status};
  PlanFrame frame{&planner, iteration, init, 0};
  MpkEmuOptions const opt{};
  RunConfig cfg = run_config(opt, 0, 0);
  cfg.num_threads = 32;
  std::string text;
  int const st = run_status(run_block(cfg, &plan_thread, &frame, text));
  if (result) *result = frame.result;
  copy_report(text, report, report_len);
  return st;
}
