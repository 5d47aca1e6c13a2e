// The C ABI of a host-emulation module: what a generated dispatcher ends with when it is built for
// the host (mpk_runtime/host_emulation.py), in place of runtime/persistent_kernel.cuh. It runs one
// task, mpk::execute_task(variant, desc, rt), as one block of kWorkerThreads fibers
// (emulation/block_runner.h) and says how that went. Loaded from Python with ctypes.
#pragma once
#include <stdio.h>
#include <string.h>

#include <string>

#include "emulation/block_runner.h"
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

struct TaskCall {
  uint32_t variant;
  TaskDesc const *task;
  Runtime const *rt;
};

inline void run_task_thread(void *p) {
  auto const &c = *static_cast<TaskCall const *>(p);
  execute_task(c.variant, *c.task, *c.rt);
}

}  // namespace emu
}  // namespace mpk

// Options of one run (mpk_runtime/host_emulation.py mirrors it). Zeros are the defaults.
typedef struct MpkEmuOptions {
  int32_t order;        // mpk::emu::Order: 0 in order, 1 reversed, 2 shuffled by seed
  int32_t race_check;   // nonzero: check shared and global accesses (needs a race-checking build)
  uint64_t seed;
  int32_t num_threads;  // 0: kWorkerThreads
  int32_t reserved;
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

// The structs Python fills in, in mpk_abi_layout's "Struct=size field:offset ...;..." format.
MPK_EMU_EXPORT int mpk_emu_layout(char *buf, int len) {
  return snprintf(buf, len,
                  "MpkTaskDesc=%zu variant:%zu task_id:%zu grid_idx:%zu scalars:%zu inputs:%zu outputs:%zu;"
                  "MpkMeta=%zu tokens:%zu paged_kv_last_page_len:%zu;"
                  "MpkBatchConfig=%zu total_num_requests:%zu test_mode:%zu eos_token_id:%zu",
                  sizeof(MpkTaskDesc), offsetof(MpkTaskDesc, variant), offsetof(MpkTaskDesc, task_id),
                  offsetof(MpkTaskDesc, grid_idx), offsetof(MpkTaskDesc, scalars), offsetof(MpkTaskDesc, inputs),
                  offsetof(MpkTaskDesc, outputs), sizeof(MpkMeta), offsetof(MpkMeta, tokens),
                  offsetof(MpkMeta, paged_kv_last_page_len), sizeof(MpkBatchConfig),
                  offsetof(MpkBatchConfig, total_num_requests), offsetof(MpkBatchConfig, test_mode),
                  offsetof(MpkBatchConfig, eos_token_id));
}

// Runs one task: `desc` is its 128-byte MpkTaskDesc, meta / batch the iteration's view.
// Returns MPK_EMU_*; `report` (NUL-terminated, truncated to report_len) says what went wrong.
MPK_EMU_EXPORT int mpk_emu_run_task(uint32_t variant, void const *desc, MpkMeta const *meta,
                                    MpkBatchConfig const *batch, uint32_t dynamic_smem_bytes,
                                    MpkEmuOptions const *options, char *report, int report_len,
                                    long long *task_error) {
  MpkEmuOptions const opt = options ? *options : MpkEmuOptions{};
  mpk::TaskDesc task;
  memcpy(static_cast<void *>(&task), desc, sizeof task);
  MpkControl control;
  memset(&control, 0, sizeof control);
  mpk::Runtime const rt{*meta, *batch, &control, 1u, 0u};
  mpk::emu::TaskCall call{variant, &task, &rt};
  mpk::emu::RunConfig cfg{};
  cfg.num_threads = opt.num_threads ? opt.num_threads : mpk::kWorkerThreads;
  cfg.order = opt.order;
  cfg.seed = opt.seed;
  cfg.race_check = opt.race_check != 0;
  cfg.task_id = task.task_id;
  cfg.dynamic_smem = mpk::dynamic_smem;
  cfg.dynamic_smem_capacity = sizeof mpk::dynamic_smem;
  cfg.dynamic_smem_bytes = dynamic_smem_bytes;
  std::string text;
  int status;
  if (cfg.race_check && !mpk::emu::kRaceCheckBuilt) {
    text = "race checking was asked of a module built without it (build with race_check=True)";
    status = MPK_EMU_INVALID;
  } else {
    int const r = mpk::emu::run_block(cfg, &mpk::emu::run_task_thread, &call, text);
    status = r == mpk::emu::kRunOk ? MPK_EMU_OK : r == mpk::emu::kRunDetected ? MPK_EMU_DETECTED : MPK_EMU_INVALID;
  }
  if (status == MPK_EMU_OK && control.task_error_launch == rt.launch_id) {
    status = MPK_EMU_TASK_ERROR;
    text = "task " + std::to_string(control.task_error_task) + " reported error " +
           std::to_string(control.task_error_code) + " (value " + std::to_string(control.task_error_value) + ")";
    if (task_error) {
      task_error[0] = control.task_error_code;
      task_error[1] = control.task_error_value;
    }
  }
  if (report && report_len > 0) snprintf(report, report_len, "%s", text.c_str());
  return status;
}
