// Waiting for a task's event: the worker's acquire spin before a body, and the same spin inside a
// body that waits for its inputs itself (Runtime::wait_for_inputs, task_api.cuh).
#pragma once
#include <stdint.h>

#include "primitives/memory_order.cuh"
#include "runtime/abi.h"

namespace mpk {
namespace detail {

constexpr uint32_t kSpinsPerCheck = 1024;  // spins between looks at the abort word

__device__ __forceinline__ bool aborted(MpkControl *control, uint32_t launch_id) {
  return ld_relaxed_gpu(&control->abort) == launch_id;
}

// Thread 0: wait until every producer of the task's event has finished this iteration. ld.acquire
// in the loop: polling with relaxed loads and one fence after measured slower on an H100.
// False when the watchdog stopped the launch meanwhile. A long wait is recorded in the worker's
// status slot, for the watchdog's report.
__device__ __forceinline__ bool wait_event(unsigned long long const *event_counters, MpkTaskDesc const &d,
                                           unsigned long long absolute_iter, MpkControl *control, uint32_t launch_id,
                                           MpkWorkerStatus *status) {
  unsigned long long const target = static_cast<unsigned long long>(d.wait_count) * (absolute_iter + 1);
  unsigned long long const *counter = &event_counters[d.wait_event];
  uint32_t spins = 0;
  while (ld_acquire_gpu(counter) < target) {
    if (++spins % kSpinsPerCheck == 0) {
      if (spins == kSpinsPerCheck) {  // a long wait: say what we wait for
        status->launch_id = launch_id;
        status->peer = MPK_NO_RANK;  // a local event, not another rank
        st_relaxed_gpu(&status->task, d.task_id);
      }
      if (aborted(control, launch_id)) return false;
    }
  }
  if (spins >= kSpinsPerCheck) st_relaxed_gpu(&status->task, MPK_NO_EVENT);
  return true;
}

}  // namespace detail
}  // namespace mpk
