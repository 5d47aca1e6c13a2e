// Per-task timeline recording into the user's profiler tensor (uint64), when one is given.
//
// Layout: the buffer is cut into num_workers + num_schedulers equal regions, one per recorder
// (worker w: region w; scheduler s: region num_workers + s), so recorders never contend. A region
// is [attempted][record 0 (2 words)][record 1]...; `attempted` counts every record the recorder
// tried to write, so attempted - fitted is the number dropped on overflow (reported by the host,
// never a corrupt trace). A record is
//   word 0: %globaltimer in ns (64 bits: no wrap-around)
//   word 1: id (bits 0..31: task id, or iteration for scheduler records)
//         | kind (bits 32..39, MPK_PROF_*) | iteration (bits 40..63, for task records)
// Only thread 0 of a worker (lane 0 of a scheduler) writes its region, so plain stores suffice.
#pragma once
#include "primitives/timer.cuh"
#include "runtime/abi.h"

namespace mpk {
namespace profiler {

__device__ __forceinline__ void record(MpkKernelParams const &p, uint32_t region, uint32_t kind, uint32_t id,
                                       uint32_t iteration) {
  unsigned long long const words = p.profiler_capacity / (p.num_workers + p.num_schedulers);
  if (words < 3) return;  // no room for the count and one record (the host refuses such buffers too)
  unsigned long long *r = p.profiler_buffer + region * words;
  unsigned long long const n = r[0];
  r[0] = n + 1;
  if (1 + 2 * (n + 1) <= words) {
    r[1 + 2 * n] = global_timer_ns();
    r[2 + 2 * n] = static_cast<unsigned long long>(id) | (static_cast<unsigned long long>(kind & 0xff) << 32) |
                   (static_cast<unsigned long long>(iteration & 0xffffff) << 40);
  }
}

}  // namespace profiler
}  // namespace mpk
