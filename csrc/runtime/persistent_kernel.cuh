// The persistent kernel: num_workers worker CTAs, then the scheduler CTA(s) whose warps are the
// local schedulers. Included by the generated translation unit after it has defined
// mpk::execute_task, kDynamicSmemBytes and task_type_name (see mpk_runtime/codegen/dispatcher.py).
//
// A host build of the same translation unit (-DMPK_HOST_EMULATION, mpk_runtime/build/host.py) gets
// the host emulator's entry points instead (emulation/entry.h): the task bodies and
// prepare_next_batch run on the CPU, with no kernel, scheduler or CUDA host code. So a saved
// test_rank0.cu, edited or not, builds for the GPU and for the emulator alike.
#pragma once
#ifdef MPK_HOST_EMULATION
#include "emulation/entry.h"
#elif defined(MPK_DEVICE_ONLY)
// A device-only build (a cubin that is never launched, build/nvcc.py): the workers with this
// module's task bodies, in the profiling instantiation alone (the other's code plus the profiler's
// records: every body compiled once, not twice). The scheduler is the same in every module, so it
// is left out here and compiled once per arch instead (runtime/scheduler_check.cu, build/cache.py).
#include "runtime/worker.cuh"

namespace mpk {

__global__ void __launch_bounds__(kWorkerThreads, 1) worker_kernel(const __grid_constant__ MpkKernelParams p) {
  worker_main<true>(p, blockIdx.x);
}

// What a launch would refuse (host.cuh's cudaFuncSetAttribute), said by the build off the GPU: the
// hungriest variant's dynamic shared memory within the arch's opt-in maximum per block (the generated
// source says it first for each variant, with its layers' names).
static_assert(kDynamicSmemBytes <= kMaxDynamicSmemBytes,
              "a task variant needs more dynamic shared memory than a block of this arch can have (227 KB on "
              "sm90 and sm100, 163 KB on sm80): give it smaller slices (a larger grid) or fewer rows per task");

}  // namespace mpk

#else
#include "runtime/scheduler.cuh"
#include "runtime/worker.cuh"

namespace mpk {

// The CTA's role is the only thing blockIdx decides; tasks never see it. Two instantiations: the
// host launches persistent_kernel<true> only when a profiler tensor was given.
template <bool kProfile>
__global__ void __launch_bounds__(kWorkerThreads, 1) persistent_kernel(const __grid_constant__ MpkKernelParams p) {
  if (blockIdx.x < p.num_workers) {
    worker_main<kProfile>(p, blockIdx.x);
    return;
  }
  uint32_t const s = (blockIdx.x - p.num_workers) * kWorkerWarps + threadIdx.x / kWarpSize;
  if (s < p.num_schedulers) scheduler_main(p, s);
}

}  // namespace mpk

#include "runtime/host.cuh"
#include "runtime/peer_memory.cuh"
#endif
