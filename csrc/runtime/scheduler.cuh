// The local schedulers: warps of the CTA(s) after the workers. Each watches the progress of its
// group of workers for the watchdog. Scheduler 0, the controller, also runs the iteration protocol:
//
//   init batching state; loop { prepare_next_batch; release the iteration (or stop);
//                              wait for END_OF_TASK_GRAPH (every worker drained its queue) }
//
// The first END_OF_TASK_GRAPH of a launch is implicit, so prepare_next_batch fills the meta tensors
// before iteration 0. While it waits, the controller runs the watchdog: when the sum of all
// progress counters has not moved for watchdog_timeout_ns, it stops the launch (abort word, then
// the stop bit on `go`) and reports MPK_STATUS_WATCHDOG; each stuck worker has already recorded
// the task it waits in (worker_status), which the host turns into the exception's record.
#pragma once
#include "primitives/memory_order.cuh"
#include "primitives/timer.cuh"
#include "primitives/warp.cuh"
#include "runtime/prepare_next_batch.cuh"
#include "runtime/profiler.cuh"

namespace mpk {
namespace detail {

constexpr unsigned kWatchIntervalNs = 2000;  // how often a scheduler samples its workers

// The whole warp: tasks finished by workers [lo, hi).
__device__ __forceinline__ unsigned long long group_progress(MpkKernelParams const &p, uint32_t lo, uint32_t hi,
                                                             int lane) {
  unsigned long long v = 0;
  for (uint32_t w = lo + lane; w < hi; w += 32) v += ld_relaxed_gpu(&p.worker_progress[w]);
  return warp_sum(v);
}

__device__ __forceinline__ bool stopped(MpkKernelParams const &p) {
  unsigned long long const g = ld_relaxed_gpu(&p.control->go);
  return (g >> 32) == p.launch_id && (g & MPK_GO_STOP);
}

__device__ __forceinline__ void release_go(MpkKernelParams const &p, unsigned long long flags_and_count) {
  st_release_gpu(&p.control->go, (static_cast<unsigned long long>(p.launch_id) << 32) | flags_and_count);
}

__device__ void watcher_main(MpkKernelParams const &p, uint32_t s, uint32_t lo, uint32_t hi, int lane) {
  while (!stopped(p) && ld_relaxed_gpu(&p.control->abort) != p.launch_id) {
    unsigned long long const v = group_progress(p, lo, hi, lane);
    if (lane == 0) st_relaxed_gpu(&p.control->scheduler_progress[s], v);
    sleep_ns(kWatchIntervalNs);
  }
}

__device__ void controller_main(MpkKernelParams const &p, uint32_t lo, uint32_t hi, int lane) {
  volatile MpkStatus *status = p.status;
  batching::Planner const planner{p.meta, p.batch, p.state, p.status};
  if (lane == 0) {
    status->code = MPK_STATUS_RUNNING;
    status->iterations = 0;
  }
  if (p.control->abort != 0) {
    // An earlier launch stopped half-way and its counters are inconsistent: run nothing until the
    // host has reset them (it does so when it reports that launch's error).
    if (lane == 0) {
      status->code = MPK_STATUS_SKIPPED;
      __threadfence_system();
      release_go(p, MPK_GO_STOP);
    }
    return;
  }
  planner.init(lane);
  if (p.profiler_buffer) {
    // A fresh trace per launch: reset every recorder's count. Workers record only after `go`, which
    // is released below, so none can race this (and no extra kernel runs between launches).
    unsigned long long const recorders = p.num_workers + p.num_schedulers;
    unsigned long long const words = p.profiler_capacity / recorders;
    for (unsigned long long r = lane; words >= 3 && r < recorders; r += 32) p.profiler_buffer[r * words] = 0;
    __syncwarp();
  }
  unsigned long long const base = p.control->iterations_total;
  profiler::Recorder recorder;  // lane 0's: scheduler 0's region
  recorder.open(p, p.num_workers);

  for (uint32_t iter = 0;; ++iter) {
    int ready = 0;
    if (lane == 0) {
      recorder.record(MPK_PROF_PREPARE_BEGIN, iter, iter);
      ready = planner.prepare_next_batch(iter);
      recorder.record(MPK_PROF_PREPARE_END, iter, iter);
    }
    ready = __shfl_sync(0xffffffffu, ready, 0);
    if (ready <= 0) {
      if (lane == 0) {
        p.control->iterations_total = base + iter;
        status->iterations = iter;
        if (ready == 0) status->code = MPK_STATUS_OK;
        if (ready < 0) st_relaxed_gpu(&p.control->abort, p.launch_id);
        __threadfence_system();
        release_go(p, MPK_GO_STOP | iter);
      }
      return;
    }
    __syncwarp();
    if (lane == 0) release_go(p, iter + 1);  // publishes the meta tensors of this iteration

    // END_OF_TASK_GRAPH: every worker with a queue has drained it for this iteration.
    unsigned long long const target = static_cast<unsigned long long>(p.end_trigger_count) * (base + iter + 1);
    unsigned long long last_progress = ~0ull, last_change = global_timer_ns(), last_look = 0;
    unsigned long long seen = 0;  // lane 0: the count that ended the wait, for the host's check
    for (;;) {
      // Lane 0 decides everything, so the warp never diverges around its shuffles.
      unsigned long long now = 0;
      int done = 0;
      if (lane == 0) {
        seen = ld_acquire_gpu(&p.control->end_count);
        done = seen >= target;
        now = global_timer_ns();
      }
      if (__shfl_sync(0xffffffffu, done, 0)) break;
      now = __shfl_sync(0xffffffffu, now, 0);
      if (now - last_look < kWatchIntervalNs) continue;
      last_look = now;
      unsigned long long const own = group_progress(p, lo, hi, lane);
      int fire = 0;
      if (lane == 0) {
        unsigned long long progress = own;
        for (uint32_t s = 1; s < p.num_schedulers; ++s) progress += ld_relaxed_gpu(&p.control->scheduler_progress[s]);
        if (progress != last_progress) {
          last_progress = progress;
          last_change = now;
        } else if (now - last_change > p.watchdog_timeout_ns) {
          fire = 1;
          st_relaxed_gpu(&p.control->abort, p.launch_id);
          status->iterations = iter;
          status->idle_ns = now - last_change;
          status->code = MPK_STATUS_WATCHDOG;
          __threadfence_system();
          release_go(p, MPK_GO_STOP | iter);
        }
      }
      if (__shfl_sync(0xffffffffu, fire, 0)) return;
    }
    int failed = 0;
    if (lane == 0) {
      status->end_seen = seen;
      status->iterations = iter + 1;
      if (ld_relaxed_gpu(&p.control->task_error_launch) == p.launch_id) {  // a task reported an error
        failed = 1;
        status->detail[0] = static_cast<int32_t>(p.control->task_error_task);
        status->code = MPK_STATUS_TASK_ERROR;
        st_relaxed_gpu(&p.control->abort, p.launch_id);
        __threadfence_system();
        release_go(p, MPK_GO_STOP | (iter + 1));
      }
    }
    if (__shfl_sync(0xffffffffu, failed, 0)) return;
  }
}

}  // namespace detail

__device__ __forceinline__ void scheduler_main(MpkKernelParams const &p, uint32_t s) {
  int const lane = threadIdx.x % kWarpSize;
  uint32_t const lo = s * p.num_workers / p.num_schedulers;
  uint32_t const hi = (s + 1) * p.num_workers / p.num_schedulers;
  if (s == 0)
    detail::controller_main(p, lo, hi, lane);
  else
    detail::watcher_main(p, s, lo, hi, lane);
}

}  // namespace mpk
