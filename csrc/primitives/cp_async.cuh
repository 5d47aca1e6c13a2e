// Asynchronous copies from global to shared memory (cp.async, sm80 and later): the copy proceeds
// while the thread runs on, and becomes visible to the thread at a wait; to the rest of the CTA
// after that wait and a __syncthreads(). Used to prefetch the next task descriptor, and by task
// bodies to stream tiles (commit one group per stage, wait for the oldest).
#pragma once
#include <stdint.h>

namespace mpk {

#ifdef MPK_HOST_EMULATION
// Host versions (emulation/block_runner.cpp): the copy is queued at issue and performed by this
// thread's cp_async_wait_all(); until then the destination keeps what it held, and a race-checking
// run reports any access to it, even by this thread. A destination outside shared memory, or an
// address that is not 16-byte aligned, stops the run as it would fault the device.
__device__ __forceinline__ void cp_async_16(void *smem_dst, void const *gmem_src) {
  ::mpk::emu::cp_async_issue(smem_dst, gmem_src, 16);
}
__device__ __forceinline__ void cp_async_commit() { ::mpk::emu::cp_async_commit(); }
__device__ __forceinline__ void cp_async_wait_all() { ::mpk::emu::cp_async_wait_all(); }
// A null source lands as 16 zero bytes (nothing is read).
__device__ __forceinline__ void cp_async_16_zfill(void *smem_dst, void const *gmem_src, bool full) {
  ::mpk::emu::cp_async_issue(smem_dst, full ? gmem_src : nullptr, 16);
}
// Lands the copies of every committed group but the newest N, as the device guarantees; the newest
// N (and uncommitted copies) stay in flight, so a body that reads a stage it did not wait for reads
// what the destination held before (and a race-checking run reports the access).
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  ::mpk::emu::cp_async_wait_group(N);
}
#else
// Starts a 16-byte copy gmem_src -> smem_dst (both 16-byte aligned), cached in L2 only (.cg).
__device__ __forceinline__ void cp_async_16(void *smem_dst, void const *gmem_src) {
  uint32_t const d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
}

// Closes the group of this thread's copies started since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until every copy this thread started has landed in shared memory.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// cp_async_16 when `full`; otherwise the 16 destination bytes become zeros and nothing is read
// (src-size 0; gmem_src must still be a global address, e.g. the tensor's base).
__device__ __forceinline__ void cp_async_16_zfill(void *smem_dst, void const *gmem_src, bool full) {
  uint32_t const d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(gmem_src), "r"(full ? 16 : 0) : "memory");
}

// Waits until at most N of this thread's committed groups are still in flight (the N most recent):
// with one group per pipeline stage, the oldest stages have landed.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

}  // namespace mpk
