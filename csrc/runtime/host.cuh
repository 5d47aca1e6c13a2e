// The module's C ABI, loaded from Python with ctypes (mpk_runtime/launcher.py). No torch, no
// pybind11: device buffers are owned by Python (torch tensors) and passed as pointers; this side
// owns only what must live in C: mapped status blocks, completion events and the launch itself.
//
// Launch results: every launch writes its MpkStatus into its own slot of a ring in mapped host
// memory and records a CUDA event. mpk_poll harvests finished launches in order and keeps the
// first error until mpk_take_error hands it over. No host callback and no memset sits between two
// launches on the stream.
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

namespace mpk {
namespace host {

constexpr int kStatusRing = 64;

struct Handle {
  int device = 0;
  MpkStatus *ring = nullptr;      // host view of the mapped ring
  MpkStatus *ring_dev = nullptr;  // device view of the same memory
  cudaEvent_t done[kStatusRing] = {};
  unsigned long long launches = 0;   // issued
  unsigned long long harvested = 0;  // finished and looked at
  bool has_error = false;
  MpkStatus error = {};
  unsigned long long error_launch = 0;
  MpkStatus last = {};  // the status of the last launch harvested
};

inline int fail(char *err, int len, char const *what, cudaError_t e) {
  if (err && len > 0) snprintf(err, len, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return -1;
}

inline double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

inline void take_result(Handle *h) {
  int const slot = static_cast<int>(h->harvested % kStatusRing);
  MpkStatus const st = h->ring[slot];
  h->last = st;
  if (st.code != MPK_STATUS_OK && !h->has_error) {
    h->has_error = true;
    h->error = st;
    h->error_launch = h->harvested + 1;
  }
  ++h->harvested;
}

// Harvest launches in order. timeout_ms < 0 waits as long as it takes. Returns 0 when every
// launch is harvested, 1 when the oldest is still running at the deadline (its live status in
// *running), -1 on a CUDA error (a kernel fault leaves the context unusable).
inline int poll(Handle *h, int timeout_ms, MpkStatus *running, char *err, int errlen) {
  double const deadline = now_ms() + timeout_ms;
  while (h->harvested < h->launches) {
    cudaEvent_t ev = h->done[h->harvested % kStatusRing];
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) {
      take_result(h);
      continue;
    }
    if (e != cudaErrorNotReady) return fail(err, errlen, "persistent kernel failed", e);
    if (timeout_ms >= 0 && now_ms() >= deadline) {
      if (running) *running = h->ring[h->harvested % kStatusRing];
      return 1;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, nullptr);
  }
  return 0;
}

}  // namespace host
}  // namespace mpk

#define MPK_FIELD(S, F) n += snprintf(buf + n, len > n ? len - n : 0, " %s:%zu", #F, offsetof(S, F))
#define MPK_STRUCT(S) n += snprintf(buf + n, len > n ? len - n : 0, "%s%s=%zu", n ? ";" : "", #S, sizeof(S))
#define MPK_CONSTANT(C) \
  n += snprintf(buf + n, len > n ? len - n : 0, " %s:%llu", #C, static_cast<unsigned long long>(C))

extern "C" {

int mpk_abi_version(void) { return MPK_ABI_VERSION; }
int mpk_worker_threads(void) { return mpk::kWorkerThreads; }
int mpk_target_sm(void) { return mpk::kTargetSm; }
unsigned mpk_dynamic_smem_bytes(void) { return mpk::kDynamicSmemBytes; }
char const *mpk_task_type_name(int opcode) { return mpk::task_type_name(opcode); }

// "Struct=size field:offset ...;..." for every struct Python fills in, then "Constants=0 NAME:value ..."
// for the numbers both sides use; mpk_runtime/codegen/abi.py compares them with its mirror and with
// mpk_runtime/contract.py when it loads the module.
int mpk_abi_layout(char *buf, int len) {
  int n = 0;
  // clang-format off: one row per struct reads better than one line per field
  MPK_STRUCT(MpkTaskDesc);
  MPK_FIELD(MpkTaskDesc, variant); MPK_FIELD(MpkTaskDesc, task_type); MPK_FIELD(MpkTaskDesc, num_triggers);
  MPK_FIELD(MpkTaskDesc, flags); MPK_FIELD(MpkTaskDesc, wait_event); MPK_FIELD(MpkTaskDesc, wait_count);
  MPK_FIELD(MpkTaskDesc, first_trigger); MPK_FIELD(MpkTaskDesc, trigger_begin); MPK_FIELD(MpkTaskDesc, task_id);
  MPK_FIELD(MpkTaskDesc, layer); MPK_FIELD(MpkTaskDesc, grid_idx); MPK_FIELD(MpkTaskDesc, scalars);
  MPK_FIELD(MpkTaskDesc, inputs); MPK_FIELD(MpkTaskDesc, outputs);
  MPK_STRUCT(MpkMeta);
  MPK_FIELD(MpkMeta, tokens); MPK_FIELD(MpkMeta, paged_kv_last_page_len);
  MPK_STRUCT(MpkBatchConfig);
  MPK_FIELD(MpkBatchConfig, total_num_requests); MPK_FIELD(MpkBatchConfig, test_mode);
  MPK_FIELD(MpkBatchConfig, eos_token_id);
  MPK_STRUCT(MpkBatchState);
  MPK_FIELD(MpkBatchState, page_queue); MPK_FIELD(MpkBatchState, counters);
  MPK_FIELD(MpkBatchState, initial_step); MPK_FIELD(MpkBatchState, page_order);
  MPK_STRUCT(MpkControl);
  MPK_FIELD(MpkControl, go); MPK_FIELD(MpkControl, abort); MPK_FIELD(MpkControl, task_error_value);
  MPK_FIELD(MpkControl, scheduler_progress);
  MPK_STRUCT(MpkWorkerStatus);
  MPK_FIELD(MpkWorkerStatus, task); MPK_FIELD(MpkWorkerStatus, launch_id); MPK_FIELD(MpkWorkerStatus, peer);
  MPK_STRUCT(MpkComm);
  MPK_FIELD(MpkComm, heap); MPK_FIELD(MpkComm, peers); MPK_FIELD(MpkComm, signals); MPK_FIELD(MpkComm, rank);
  MPK_FIELD(MpkComm, world_size);
  MPK_STRUCT(MpkStatus);
  MPK_FIELD(MpkStatus, code); MPK_FIELD(MpkStatus, iterations); MPK_FIELD(MpkStatus, idle_ns);
  MPK_FIELD(MpkStatus, detail); MPK_FIELD(MpkStatus, end_seen);
  MPK_STRUCT(MpkKernelParams);
  MPK_FIELD(MpkKernelParams, tasks); MPK_FIELD(MpkKernelParams, triggers); MPK_FIELD(MpkKernelParams, control);
  MPK_FIELD(MpkKernelParams, status); MPK_FIELD(MpkKernelParams, profiler_buffer);
  MPK_FIELD(MpkKernelParams, launch_id); MPK_FIELD(MpkKernelParams, end_trigger_count);
  MPK_FIELD(MpkKernelParams, watchdog_timeout_ns); MPK_FIELD(MpkKernelParams, meta);
  MPK_FIELD(MpkKernelParams, batch); MPK_FIELD(MpkKernelParams, state); MPK_FIELD(MpkKernelParams, comm);
  n += snprintf(buf + n, len > n ? len - n : 0, ";Constants=0");
  MPK_CONSTANT(MPK_ABI_VERSION); MPK_CONSTANT(MPK_MAX_INPUTS); MPK_CONSTANT(MPK_MAX_OUTPUTS);
  MPK_CONSTANT(MPK_MAX_SCHEDULERS); MPK_CONSTANT(MPK_NO_EVENT); MPK_CONSTANT(MPK_NO_RANK);
  MPK_CONSTANT(MPK_STATUS_OK); MPK_CONSTANT(MPK_STATUS_RUNNING); MPK_CONSTANT(MPK_STATUS_WATCHDOG);
  MPK_CONSTANT(MPK_STATUS_PAGES_EXHAUSTED); MPK_CONSTANT(MPK_STATUS_SKIPPED); MPK_CONSTANT(MPK_STATUS_TASK_ERROR);
  MPK_CONSTANT(MPK_TASK_ERROR_INDEX); MPK_CONSTANT(MPK_TASK_ERROR_VALUE);
  MPK_CONSTANT(MPK_PROF_TASK_BEGIN); MPK_CONSTANT(MPK_PROF_TASK_END); MPK_CONSTANT(MPK_PROF_PREPARE_BEGIN);
  MPK_CONSTANT(MPK_PROF_PREPARE_END); MPK_CONSTANT(MPK_PROF_TASK_MARK);
  // clang-format on
  return n;
}

// How many CTAs of this kernel fit on one SM of `device`, and how many SMs it has.
int mpk_occupancy(int device, int *ctas_per_sm, int *num_sms, char *err, int errlen) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return mpk::host::fail(err, errlen, "cudaSetDevice", e);
  for (auto kernel : {mpk::persistent_kernel<false>, mpk::persistent_kernel<true>}) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(mpk::kDynamicSmemBytes));
    if (e != cudaSuccess) return mpk::host::fail(err, errlen, "cudaFuncSetAttribute(dynamic shared memory)", e);
  }
  // The profiling instantiation uses a few more registers: the co-residency check is for it.
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, mpk::persistent_kernel<true>, mpk::kWorkerThreads,
                                                    mpk::kDynamicSmemBytes);
  if (e != cudaSuccess) return mpk::host::fail(err, errlen, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", e);
  e = cudaDeviceGetAttribute(num_sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return mpk::host::fail(err, errlen, "cudaDeviceGetAttribute", e);
  return 0;
}

void *mpk_create(int device, char *err, int errlen) {
  auto *h = new mpk::host::Handle();
  h->device = device;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess)
    e = cudaHostAlloc(reinterpret_cast<void **>(&h->ring), sizeof(MpkStatus) * mpk::host::kStatusRing,
                      cudaHostAllocMapped);
  if (e == cudaSuccess) e = cudaHostGetDevicePointer(reinterpret_cast<void **>(&h->ring_dev), h->ring, 0);
  for (int i = 0; e == cudaSuccess && i < mpk::host::kStatusRing; ++i)
    e = cudaEventCreateWithFlags(&h->done[i], cudaEventDisableTiming);
  if (e != cudaSuccess) {
    mpk::host::fail(err, errlen, "creating the runtime's status ring", e);
    for (auto &ev : h->done)
      if (ev) cudaEventDestroy(ev);
    if (h->ring) cudaFreeHost(h->ring);
    delete h;
    return nullptr;
  }
  memset(h->ring, 0, sizeof(MpkStatus) * mpk::host::kStatusRing);
  return h;
}

// Launches one run of the persistent kernel on `stream` (a cudaStream_t; 0 is the legacy default
// stream) without waiting for it. Fills in params->status and params->launch_id. First it harvests
// the launches that have finished (mpk_poll with no wait), so that a launch costs the host one call
// and not three; where one of them ended with an error it launches nothing and returns 1 (the caller
// reports the error: mpk_take_error). 0: launched; -1: the launch failed; -2: harvesting failed (a
// kernel fault: the context is no longer usable). Both with the reason in err.
int mpk_launch(void *handle, MpkKernelParams *params, int grid, void *stream, char *err, int errlen) {
  auto *h = static_cast<mpk::host::Handle *>(handle);
  if (mpk::host::poll(h, 0, nullptr, err, errlen) < 0) return -2;
  while (h->launches - h->harvested >= static_cast<unsigned long long>(mpk::host::kStatusRing)) {
    // The ring is full of running launches: wait for the oldest, not for all of them.
    if (mpk::host::poll(h, 1, nullptr, err, errlen) < 0) return -2;
  }
  if (h->has_error) return 1;
  cudaError_t e = cudaSetDevice(h->device);
  if (e != cudaSuccess) return mpk::host::fail(err, errlen, "cudaSetDevice", e);
  int const slot = static_cast<int>(h->launches % mpk::host::kStatusRing);
  h->ring[slot].code = MPK_STATUS_RUNNING;
  params->status = h->ring_dev + slot;
  params->launch_id = static_cast<uint32_t>(h->launches % 0xfffffffeull) + 1;
  void *args[] = {params};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  void const *kernel = params->profiler_buffer ? reinterpret_cast<void const *>(mpk::persistent_kernel<true>)
                                               : reinterpret_cast<void const *>(mpk::persistent_kernel<false>);
  e = cudaLaunchCooperativeKernel(kernel, dim3(grid), dim3(mpk::kWorkerThreads), args, mpk::kDynamicSmemBytes, s);
  if (e != cudaSuccess) return mpk::host::fail(err, errlen, "cudaLaunchCooperativeKernel", e);
  e = cudaEventRecord(h->done[slot], s);
  if (e != cudaSuccess) return mpk::host::fail(err, errlen, "cudaEventRecord", e);
  ++h->launches;
  return 0;
}

int mpk_poll(void *handle, int timeout_ms, MpkStatus *running, char *err, int errlen) {
  return mpk::host::poll(static_cast<mpk::host::Handle *>(handle), timeout_ms, running, err, errlen);
}

// 1 and the first unreported error status (and the 1-based launch it came from), or 0.
int mpk_take_error(void *handle, MpkStatus *out, unsigned long long *launch) {
  auto *h = static_cast<mpk::host::Handle *>(handle);
  if (!h->has_error) return 0;
  *out = h->error;
  *launch = h->error_launch;
  h->has_error = false;
  return 1;
}

// 1 and the status of the last launch harvested (an error's too), or 0 before the first.
int mpk_last_status(void *handle, MpkStatus *out) {
  auto *h = static_cast<mpk::host::Handle *>(handle);
  if (h->harvested == 0) return 0;
  *out = h->last;
  return 1;
}

// Frees the handle once every launch has finished. Returns 1, and frees nothing (a running kernel
// still writes into the status ring), when a launch is still running after timeout_ms.
int mpk_destroy(void *handle, int timeout_ms) {
  auto *h = static_cast<mpk::host::Handle *>(handle);
  if (!h) return 0;
  cudaSetDevice(h->device);
  char err[16];
  if (mpk::host::poll(h, timeout_ms, nullptr, err, sizeof(err)) == 1) return 1;
  for (auto &ev : h->done)
    if (ev) cudaEventDestroy(ev);
  if (h->ring) cudaFreeHost(h->ring);
  delete h;
  return 0;
}

}  // extern "C"

#undef MPK_FIELD
#undef MPK_STRUCT
#undef MPK_CONSTANT
