// The C ABI of a host-emulation module: what runtime/persistent_kernel.cuh includes in place of the
// kernel when a generated dispatcher is built for the host (-DMPK_HOST_EMULATION,
// mpk_runtime/build/host.py). It runs one task, mpk::execute_task(variant, desc, rt), as one block
// of kWorkerThreads fibers (emulation/block_runner.h), and the device's prepare_next_batch
// (runtime/prepare_next_batch.cuh) as the controller warp would, and says how that went. Loaded from
// Python with ctypes (mpk_runtime/run/host_runner.py). Only what depends on the module's task
// bodies is here; the rest is entry_common.cpp, compiled once and linked into every module.
#pragma once
#include "emulation/entry_common.h"

namespace mpk {

// The definition task_api.cuh's `extern __shared__` declaration needs: per OS thread, like every
// __shared__ variable here (see emulation/cuda_shim.h). In the module, beside the bodies that use it.
thread_local __align__(128) unsigned char dynamic_smem[MPK_EMU_MAX_DYNAMIC_SMEM];
static_assert(kDynamicSmemBytes <= MPK_EMU_MAX_DYNAMIC_SMEM, "a variant asks for more shared memory than a CTA has");

namespace emu {
inline void execute(uint32_t variant, TaskDesc const &task, Runtime const &rt) { execute_task(variant, task, rt); }
}  // namespace emu

}  // namespace mpk

MPK_EMU_EXPORT unsigned mpk_dynamic_smem_bytes(void) { return mpk::kDynamicSmemBytes; }
MPK_EMU_EXPORT char const *mpk_task_type_name(int opcode) { return mpk::task_type_name(opcode); }

// Runs one task: `desc` is its 128-byte MpkTaskDesc, meta / batch the iteration's view.
// Returns MPK_EMU_*; `report` (NUL-terminated, truncated to report_len) says what went wrong.
MPK_EMU_EXPORT int mpk_emu_run_task(uint32_t variant, void const *desc, MpkMeta const *meta,
                                    MpkBatchConfig const *batch, uint32_t dynamic_smem_bytes,
                                    MpkEmuOptions const *options, char *report, int report_len, long long *task_error) {
  return mpk::emu::run_task(&mpk::emu::execute, mpk::dynamic_smem, sizeof mpk::dynamic_smem, variant, desc, meta, batch,
                            dynamic_smem_bytes, options, report, report_len, task_error);
}

// Runs the device's prepare_next_batch on `state` (the MpkBatchState of a launch, host memory) as
// the controller warp does: with `init`, the whole warp first resets the batching state (the start
// of a launch). `*result`: 1 a batch is ready, 0 stop, -1 error (status->code says which).
MPK_EMU_EXPORT int mpk_emu_prepare_next_batch(MpkMeta const *meta, MpkBatchConfig const *batch,
                                              MpkBatchState const *state, MpkStatus *status, uint32_t iteration,
                                              int init, int *result, char *report, int report_len) {
  return mpk::emu::prepare_next_batch(mpk::dynamic_smem, sizeof mpk::dynamic_smem, meta, batch, state, status,
                                      iteration, init, result, report, report_len);
}
