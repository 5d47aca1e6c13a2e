// Launching a task body alone (mpk_runtime/task_bodies.py): one thread block per task descriptor,
// no scheduler, no events, so a body can be tested and timed by itself. The generated module
// declares one MPK_TASK_BODY per variant and exposes launch_body / body_smem_bytes with pybind11.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <string>

#include "runtime/task_api.cuh"

namespace mpk {

struct BodyLauncher {
  virtual ~BodyLauncher() = default;
  virtual cudaError_t launch(TaskDesc const *descs, int count, MpkMeta const &meta, MpkBatchConfig const &batch,
                             MpkControl *control, cudaStream_t stream) = 0;
  virtual unsigned smem() const = 0;
};

inline std::map<int, BodyLauncher *> &body_registry() {
  static std::map<int, BodyLauncher *> bodies;
  return bodies;
}

// The block's descriptor goes to shared memory first, as in the persistent kernel.
#define MPK_TASK_BODY(VARIANT, CALL, SMEM)                                                                   \
  __global__ void __launch_bounds__(kWorkerThreads, 1) task_body_##VARIANT(                                  \
      TaskDesc const *descs, MpkMeta const meta, MpkBatchConfig const batch, MpkControl *control) {          \
    __shared__ __align__(128) TaskDesc task;                                                                 \
    if (threadIdx.x < sizeof(TaskDesc) / 16)                                                                 \
      reinterpret_cast<uint4 *>(&task)[threadIdx.x] =                                                        \
          reinterpret_cast<uint4 const *>(descs + blockIdx.x)[threadIdx.x];                                  \
    __syncthreads();                                                                                         \
    Runtime const rt{meta, batch, control, 1, 0};                                                            \
    CALL;                                                                                                    \
  }                                                                                                          \
  struct TaskBody##VARIANT : BodyLauncher {                                                                  \
    TaskBody##VARIANT() { body_registry()[VARIANT] = this; }                                                 \
    unsigned smem() const override { return SMEM; }                                                          \
    cudaError_t launch(TaskDesc const *descs, int count, MpkMeta const &meta, MpkBatchConfig const &batch,   \
                       MpkControl *control, cudaStream_t stream) override {                                  \
      cudaError_t e = cudaFuncSetAttribute(task_body_##VARIANT, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                           static_cast<int>(SMEM));                                          \
      if (e != cudaSuccess) return e;                                                                        \
      task_body_##VARIANT<<<count, kWorkerThreads, SMEM, stream>>>(descs, meta, batch, control);             \
      return cudaGetLastError();                                                                             \
    }                                                                                                        \
  } task_body_launcher_##VARIANT;

// Returns "" or the error. meta / batch: the bytes of an MpkMeta / MpkBatchConfig.
inline std::string launch_body(int variant, uintptr_t descs, int count, std::string const &meta,
                               std::string const &batch, uintptr_t control, uintptr_t stream) {
  auto it = body_registry().find(variant);
  if (it == body_registry().end()) return "no task body for variant " + std::to_string(variant);
  if (meta.size() != sizeof(MpkMeta) || batch.size() != sizeof(MpkBatchConfig))
    return "meta / batch structs do not match this module's layout (rebuild it)";
  MpkMeta m;
  MpkBatchConfig b;
  memcpy(&m, meta.data(), sizeof m);
  memcpy(&b, batch.data(), sizeof b);
  cudaError_t e = it->second->launch(reinterpret_cast<TaskDesc const *>(descs), count, m, b,
                                     reinterpret_cast<MpkControl *>(control), reinterpret_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

inline unsigned body_smem_bytes(int variant) {
  auto it = body_registry().find(variant);
  return it == body_registry().end() ? 0u : it->second->smem();
}

}  // namespace mpk
