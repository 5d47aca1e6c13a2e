// The persistent kernel: num_workers worker CTAs, then the scheduler CTA(s) whose warps are the
// local schedulers. Included by the generated translation unit after it has defined
// mpk::execute_task, kDynamicSmemBytes and task_type_name (see mpk_runtime/codegen.py).
#pragma once
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
