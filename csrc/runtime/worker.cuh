// The worker: one CTA per SM that runs its queue of tasks, in program order, every iteration.
//
// Per task: the descriptor is already in shared memory (prefetched with cp.async while the previous
// task ran); thread 0 acquire-spins on the task's one event, if it has one; the CTA runs the body;
// thread 0 publishes with one fence and then, per triggered event, a store of the iteration's
// target (events with one producer) or a relaxed increment (several producers). That is one
// acquire spin per dependency and no round trip through a scheduler on the critical path.
#pragma once
#include "primitives/cp_async.cuh"
#include "primitives/memory_order.cuh"
#include "runtime/profiler.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace detail {

constexpr uint32_t kSpinsPerCheck = 1024;  // spins between looks at the abort word

// 8 threads copy the 128-byte descriptor, 16 bytes each, without blocking: the copy overlaps
// whatever the CTA runs before cp_async_wait_all().
__device__ __forceinline__ void prefetch_desc(MpkTaskDesc *dst, MpkTaskDesc const *src) {
  if (threadIdx.x < sizeof(MpkTaskDesc) / 16)
    cp_async_16(reinterpret_cast<char *>(dst) + 16 * threadIdx.x,
                reinterpret_cast<char const *>(src) + 16 * threadIdx.x);
  cp_async_commit();
}

__device__ __forceinline__ bool aborted(MpkKernelParams const &p) {
  return ld_relaxed_gpu(&p.control->abort) == p.launch_id;
}

// Thread 0: wait until the controller releases iteration `iter` of this launch. False: stop.
__device__ __forceinline__ bool wait_go(MpkKernelParams const &p, uint32_t iter) {
  unsigned long long const want = static_cast<unsigned long long>(p.launch_id) << 32;
  for (;;) {
    unsigned long long g = ld_acquire_gpu(&p.control->go);
    if ((g & ~0xffffffffull) != want) continue;  // still the previous launch's word
    if (g & MPK_GO_STOP) return false;
    if ((g & MPK_GO_ITERATIONS) > iter) return true;
  }
}

// Thread 0: wait until every producer of the task's event has finished this iteration. ld.acquire
// in the loop: polling with relaxed loads and one fence after measured slower on an H100.
// False when the watchdog stopped the launch meanwhile.
__device__ __forceinline__ bool wait_event(MpkKernelParams const &p, uint32_t worker, TaskDesc const &d,
                                           unsigned long long absolute_iter) {
  unsigned long long const target = static_cast<unsigned long long>(d.wait_count) * (absolute_iter + 1);
  unsigned long long const *counter = &p.event_counters[d.wait_event];
  uint32_t spins = 0;
  while (ld_acquire_gpu(counter) < target) {
    if (++spins % kSpinsPerCheck == 0) {
      if (spins == kSpinsPerCheck) {  // a long wait: say what we wait for, for the watchdog report
        p.worker_status[worker].launch_id = p.launch_id;
        p.worker_status[worker].peer = MPK_NO_RANK;  // a local event, not another rank
        st_relaxed_gpu(&p.worker_status[worker].task, d.task_id);
      }
      if (aborted(p)) return false;
    }
  }
  if (spins >= kSpinsPerCheck) st_relaxed_gpu(&p.worker_status[worker].task, MPK_NO_EVENT);
  return true;
}

// What thread 0 needs of a task between its dependency and its publication, in registers: loaded
// while the worker waits, so that nothing on the critical path reads shared memory.
struct Publish {
  uint32_t first_trigger;
  uint32_t num_triggers;
  uint32_t trigger_begin;
  bool first_single;
};

// Thread 0, after the CTA finished a task: publish its writes to every consumer event with one
// fence, then per event a store of the iteration's target (a single producer: a plain store is
// seen sooner than an atomic) or a relaxed increment (several producers).
__device__ __forceinline__ void publish(MpkKernelParams const &p, Publish const &t, unsigned long long absolute_iter) {
  if (t.num_triggers == 0) return;
  fence_acq_rel_gpu();
  if (t.first_single)
    st_relaxed_gpu(&p.event_counters[t.first_trigger], absolute_iter + 1);
  else
    red_add_relaxed_gpu(&p.event_counters[t.first_trigger], 1);
  for (uint32_t i = 1; i < t.num_triggers; ++i) {
    uint32_t const e = p.triggers[t.trigger_begin + i - 1];
    if (e & MPK_TRIGGER_SINGLE)
      st_relaxed_gpu(&p.event_counters[e & ~MPK_TRIGGER_SINGLE], absolute_iter + 1);
    else
      red_add_relaxed_gpu(&p.event_counters[e], 1);
  }
}

}  // namespace detail

// kProfile: record a begin and an end per task. A template parameter, so that a kernel launched
// without a profiler tensor carries no trace of it (not even a branch on the hot path).
template <bool kProfile>
__device__ __forceinline__ void worker_main(MpkKernelParams const &p, uint32_t worker) {
  __shared__ __align__(128) TaskDesc descs[2];
  __shared__ uint32_t go_on;
  __shared__ profiler::Recorder recorder;  // thread 0's; task bodies mark phases through Runtime
  if (kProfile && threadIdx.x == 0) recorder.open(p, worker);
  uint32_t const q_begin = p.queue_offsets[worker];
  uint32_t const q_end = p.queue_offsets[worker + 1];
  unsigned long long const base = p.control->iterations_total;  // written by the previous launch
  unsigned long long finished = 0;  // thread 0's count of tasks run, for the watchdog

  for (uint32_t iter = 0;; ++iter) {
    if (q_begin < q_end) detail::prefetch_desc(&descs[0], &p.tasks[q_begin]);
    if (threadIdx.x == 0) go_on = detail::wait_go(p, iter);
    __syncthreads();
    if (!go_on) return;
    Runtime const rt{p.meta,
                     p.batch,
                     p.control,
                     p.launch_id,
                     iter,
                     base + iter,
                     &p.worker_status[worker],
                     &p.comm,
                     kProfile ? &recorder : nullptr};
    uint32_t buf = 0;
    for (uint32_t q = q_begin; q < q_end; ++q, buf ^= 1) {
      cp_async_wait_all();
      __syncthreads();  // descs[buf] complete and visible; descs[buf ^ 1] no longer read
      TaskDesc const &d = descs[buf];
      uint32_t const variant = d.variant;
      bool const waits = d.wait_event != MPK_NO_EVENT;
      detail::Publish const pub{d.first_trigger, d.num_triggers, d.trigger_begin,
                                (d.flags & MPK_FLAG_FIRST_TRIGGER_SINGLE) != 0};
      if (q + 1 < q_end) detail::prefetch_desc(&descs[buf ^ 1], &p.tasks[q + 1]);
      if (waits) {
        bool ok = true;
        if (threadIdx.x == 0) ok = detail::wait_event(p, worker, d, base + iter);
        if (!__syncthreads_and(ok)) return;  // the barrier and the abort broadcast in one
      }
      if (kProfile && threadIdx.x == 0) recorder.record(MPK_PROF_TASK_BEGIN, d.task_id, iter);
      execute_task(variant, d, rt);
      __syncthreads();
      if (threadIdx.x == 0) {
        if (kProfile) recorder.record(MPK_PROF_TASK_END, d.task_id, iter);  // the body's end
        detail::publish(p, pub, base + iter);
        st_relaxed_gpu(&p.worker_progress[worker], ++finished);
      }
    }
    if (threadIdx.x == 0 && q_begin < q_end) red_add_release_gpu(&p.control->end_count, 1);
    __syncthreads();  // nobody still reads go_on when thread 0 writes it for the next iteration
  }
}

}  // namespace mpk
