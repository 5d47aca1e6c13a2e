// Per-task timeline recording into the user's profiler tensor (uint64), when one is given.
//
// Layout: the buffer is cut into num_workers + num_schedulers equal regions, one per recorder
// (worker w: region w; scheduler s: region num_workers + s), so recorders never contend. A region
// is [attempted][record 0 (2 words)][record 1]...; `attempted` counts every record the recorder
// tried to write, so attempted - fitted is the number dropped on overflow (reported by the host,
// never a corrupt trace). A record is
//   word 0: %globaltimer in ns (64 bits: no wrap-around)
//   word 1: id (bits 0..31: task id, phase number for marks, iteration for scheduler records)
//         | kind (bits 32..39, MPK_PROF_*) | iteration (bits 40..63, for task records)
// Only thread 0 of a worker (lane 0 of a scheduler) writes its region, so plain stores suffice.
#pragma once
#include "primitives/timer.cuh"
#include "runtime/abi.h"

namespace mpk {
namespace profiler {

// One recorder's region and its count of attempted records, kept by the one thread that records
// (in shared memory for a worker, whose task bodies mark phases through Runtime). The count is
// stored after each record but never loaded back: a load from global memory would hold the
// recording thread for a round trip inside the very task it times. The controller zeroes every
// region's count before it releases a launch, and a recorder starts counting at 0 after that.
struct Recorder {
  unsigned long long *region;  // null: this launch records nothing
  unsigned long long words;    // the region's size
  unsigned long long attempted;

  __device__ __forceinline__ void open(MpkKernelParams const &p, uint32_t index) {
    words = p.profiler_capacity / (p.num_workers + p.num_schedulers);
    // No room for the count and one record: record nothing (the host refuses such buffers too).
    region = p.profiler_buffer != nullptr && words >= 3 ? p.profiler_buffer + index * words : nullptr;
    attempted = 0;
  }

  __device__ __forceinline__ void record(uint32_t kind, uint32_t id, uint32_t iteration) {
    if (region == nullptr) return;
    unsigned long long const n = attempted++;
    region[0] = n + 1;
    if (1 + 2 * (n + 1) <= words) {
      region[1 + 2 * n] = global_timer_ns();
      region[2 + 2 * n] = static_cast<unsigned long long>(id) | (static_cast<unsigned long long>(kind & 0xff) << 32) |
                          (static_cast<unsigned long long>(iteration & 0xffffff) << 40);
    }
  }
};

}  // namespace profiler
}  // namespace mpk
