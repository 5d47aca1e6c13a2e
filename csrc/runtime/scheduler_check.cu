// The scheduler and prepare_next_batch alone, for a device-only build (a cubin never launched):
// they do not depend on the graph, so a module's device-only build leaves them out
// (runtime/persistent_kernel.cuh) and build/cache.py compiles this once per arch and cache instead.
#include "runtime/scheduler.cuh"

__global__ void __launch_bounds__(mpk::kWorkerThreads, 1) scheduler_kernel(const __grid_constant__ MpkKernelParams p) {
  uint32_t const s = blockIdx.x * mpk::kWorkerWarps + threadIdx.x / mpk::kWarpSize;
  if (s < p.num_schedulers) mpk::scheduler_main(p, s);
}
