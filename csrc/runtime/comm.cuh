// Signals between the ranks of one host, for cross-rank tasks (tasks/common/allreduce.cuh).
//
// Every rank runs the same task graph. A cross-rank task stores its part into its peers' heaps
// (peer memory, over NVLink), then signals each peer; then it waits until every peer has signalled
// the same task, and reads what they stored into its own heap. A signal is a word of the receiver's
// heap, signals[task * world_size + sender], written only by the sender: the epoch (absolute
// iteration + 1) the sender has finished storing. Epochs only grow across iterations and launches,
// so nothing is ever reset, and a wait is "signal >= epoch".
//
// Memory order: the CTA's peer stores, a __syncthreads, then one thread's fence_acq_rel_sys and
// relaxed system-scope signal stores: a release (cumulative through the barrier) that a peer's
// ld_acquire_sys of the signal synchronizes with; its __syncthreads then orders the whole CTA's
// reads of the data after that acquire. System scope, because the two sides run on different GPUs.
#pragma once
#include "primitives/memory_order.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace comm {

constexpr uint32_t kSpinsPerCheck = 1024;  // spins between looks at the abort word
constexpr uint32_t kMaxRanks = kWarpSize;  // one lane of warp 0 watches each rank

// The address, in rank q's heap as mapped here, of `local` (an address in this rank's heap): every
// heap has the same layout.
template <typename T>
__device__ __forceinline__ T *peer_ptr(MpkComm const &c, T *local, uint32_t q) {
  return reinterpret_cast<T *>(c.peers[q] + (reinterpret_cast<char const *>(local) - c.heap));
}

// One thread, after the CTA has stored its part of `task` into its peers' heaps and passed a
// __syncthreads: make those stores visible to the peers, then tell each of them that this rank's part
// of `task` for `epoch` is there.
__device__ __forceinline__ void signal_peers(MpkComm const &c, uint32_t task, unsigned long long epoch) {
  fence_acq_rel_sys();
  unsigned long long *mine = &c.signals[static_cast<size_t>(task) * c.world_size + c.rank];
  for (uint32_t q = 0; q < c.world_size; ++q)
    if (q != c.rank) st_relaxed_sys(peer_ptr(c, mine, q), epoch);
}

// All 32 lanes of one warp: wait until every other rank has signalled `task` for `epoch` (lane q
// watches rank q). A long wait records the task and the first rank still missing in the worker's
// status, for the watchdog's report. Returns false when the watchdog stopped the launch meanwhile.
// The caller's following __syncthreads orders the CTA's reads of the peers' data after the acquire.
__device__ __forceinline__ bool wait_peers(Runtime const &rt, uint32_t task, unsigned long long epoch) {
  MpkComm const &c = *rt.comm;
  uint32_t const lane = threadIdx.x % kWarpSize;
  unsigned long long const *signal = &c.signals[static_cast<size_t>(task) * c.world_size + lane];
  bool done = lane >= c.world_size || lane == c.rank;
  uint32_t spins = 0;
  bool recorded = false;
  while (!__all_sync(0xffffffffu, done)) {
    if (!done) done = ld_acquire_sys(signal) >= epoch;
    if (++spins % kSpinsPerCheck != 0) continue;
    unsigned const missing = __ballot_sync(0xffffffffu, !done);
    int stop = 0;
    if (lane == 0) {
      if (rt.status && missing) {  // the first rank still missing, for the watchdog's report
        rt.status->launch_id = rt.launch_id;
        rt.status->peer = static_cast<uint32_t>(__ffs(missing) - 1);
        st_relaxed_gpu(&rt.status->task, task);
        recorded = true;
      }
      stop = ld_relaxed_gpu(&rt.control->abort) == rt.launch_id;
    }
    if (__shfl_sync(0xffffffffu, stop, 0)) return false;
  }
  if (lane == 0 && recorded) st_relaxed_gpu(&rt.status->task, MPK_NO_EVENT);
  return true;
}

}  // namespace comm
}  // namespace mpk
