// The part of a host-emulation module's C ABI that does not depend on its task bodies (see
// entry_common.h): built once per arch and set of flags with the module's own flags (race checking
// included, so the planner's and the task frame's accesses are checked as before) and linked into
// every module (mpk_runtime/build/host.py).
#include "emulation/entry_common.h"

#include <stdio.h>
#include <string.h>

#include <string>

#include "runtime/prepare_next_batch.cuh"

namespace mpk {
namespace emu {

#ifdef __SANITIZE_THREAD__
constexpr bool kRaceCheckBuilt = true;  // -fsanitize=thread: every access calls race_check.cpp
#else
constexpr bool kRaceCheckBuilt = false;
#endif

namespace {

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
  ExecuteTask execute;
};

void run_task_thread(void *p) {
  auto &f = *static_cast<TaskFrame *>(p);
  Runtime const rt{f.meta, f.batch, &f.control, f.launch_id, f.iteration, f.absolute_iteration};
  f.execute(f.variant, f.task, rt);
}

// The controller warp's part of the iteration protocol (runtime/scheduler.cuh): the whole warp
// initialises the batching state, then lane 0 plans the batch.
struct PlanFrame {
  batching::Planner const *planner;
  uint32_t iteration;
  int init;
  int result;
};

void plan_thread(void *p) {
  auto &f = *static_cast<PlanFrame *>(p);
  int const lane = static_cast<int>(threadIdx.x);
  if (f.init) f.planner->init(lane);
  if (lane == 0) f.result = f.planner->prepare_next_batch(f.iteration);
}

RunConfig run_config(MpkEmuOptions const &opt, uint32_t task_id, unsigned char *smem, size_t smem_capacity,
                     uint32_t dynamic_smem_bytes) {
  RunConfig cfg{};
  cfg.num_threads = opt.num_threads ? opt.num_threads : kWorkerThreads;
  cfg.order = opt.order;
  cfg.seed = opt.seed;
  cfg.race_check = opt.race_check != 0;
  cfg.time_limit_s = opt.time_limit_s;
  cfg.task_id = task_id;
  cfg.dynamic_smem = smem;
  cfg.dynamic_smem_capacity = smem_capacity;
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

int run_status(int r) { return r == kRunOk ? MPK_EMU_OK : r == kRunDetected ? MPK_EMU_DETECTED : MPK_EMU_INVALID; }

void copy_report(std::string const &text, char *report, int report_len) {
  if (report && report_len > 0) snprintf(report, report_len, "%s", text.c_str());
}

}  // namespace

int run_task(ExecuteTask execute, unsigned char *smem, size_t smem_capacity, uint32_t variant, void const *desc,
             MpkMeta const *meta, MpkBatchConfig const *batch, uint32_t dynamic_smem_bytes,
             MpkEmuOptions const *options, char *report, int report_len, long long *task_error) {
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
  frame.execute = execute;
  RunConfig cfg = run_config(opt, frame.task.task_id, smem, smem_capacity, dynamic_smem_bytes);
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

int prepare_next_batch(unsigned char *smem, size_t smem_capacity, MpkMeta const *meta, MpkBatchConfig const *batch,
                       MpkBatchState const *state, MpkStatus *status, uint32_t iteration, int init, int *result,
                       char *report, int report_len) {
  batching::Planner const planner{*meta, *batch, *state, status};
  PlanFrame frame{&planner, iteration, init, 0};
  MpkEmuOptions const opt{};
  RunConfig cfg = run_config(opt, 0, smem, smem_capacity, 0);
  cfg.num_threads = 32;
  std::string text;
  int const st = run_status(run_block(cfg, &plan_thread, &frame, text));
  if (result) *result = frame.result;
  copy_report(text, report, report_len);
  return st;
}

}  // namespace emu
}  // namespace mpk

MPK_EMU_EXPORT int mpk_abi_version(void) { return MPK_ABI_VERSION; }
MPK_EMU_EXPORT int mpk_worker_threads(void) { return mpk::kWorkerThreads; }
MPK_EMU_EXPORT int mpk_target_sm(void) { return mpk::kTargetSm; }
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

// The words the last mpk_emu_run_task updated atomically: fills up to `max` (address, bytes) pairs,
// returns how many there are.
MPK_EMU_EXPORT int mpk_emu_atomic_words(uint64_t *addrs, uint32_t *bytes, int max) {
  return static_cast<int>(mpk::emu::copy_atomic_words(addrs, bytes, max > 0 ? static_cast<size_t>(max) : 0));
}
