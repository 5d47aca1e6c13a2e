// Memory-order primitives: the acquire / release / relaxed accesses to global memory that order
// task execution across SMs (event counters, the controller's `go` word, progress counters). Most
// are gpu scope (every thread of the device, not the host); the _sys ones are system scope, for the
// signals that ranks on other GPUs of the host store into this GPU's memory (peer memory over
// NVLink, runtime/comm.cuh). All use the PTX memory model's names;
// a plain C++ access carries no ordering and is never used for these words. One small function
// per instruction, so the hot path stays auditable. On the host (MPK_HOST_EMULATION) each is the
// C++ atomic of the same order (GCC's __atomic builtins), which a race-checking build sees as atomic;
// its writes are noted (emu::note_atomic) as the shim's atomics are.
#pragma once
#include <stdint.h>

namespace mpk {

// Acquire load, gpu scope: this thread's later accesses are ordered after it; reading the value of a
// release (st / red .release, or a relaxed write after fence_acq_rel_gpu) synchronizes with that release.
__device__ __forceinline__ unsigned long long ld_acquire_gpu(unsigned long long const *p) {
#ifdef MPK_HOST_EMULATION
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}

// Relaxed load, gpu scope: atomic and coherent across SMs (never a stale L1 copy) but orders nothing.
__device__ __forceinline__ unsigned long long ld_relaxed_gpu(unsigned long long const *p) {
#ifdef MPK_HOST_EMULATION
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#else
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}

// Relaxed load, gpu scope, 32 bits: atomic and coherent across SMs but orders nothing.
__device__ __forceinline__ uint32_t ld_relaxed_gpu(uint32_t const *p) {
#ifdef MPK_HOST_EMULATION
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#else
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#endif
}

// Release store, gpu scope: this thread's earlier accesses (and the writes it observed) are ordered
// before it; synchronizes with an acquire load that reads this value.
__device__ __forceinline__ void st_release_gpu(unsigned long long *p, unsigned long long v) {
#ifdef MPK_HOST_EMULATION
  ::mpk::emu::note_atomic(p, sizeof *p);
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#else
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// Relaxed store, gpu scope: atomic but orders nothing by itself; after fence_acq_rel_gpu() it releases.
__device__ __forceinline__ void st_relaxed_gpu(unsigned long long *p, unsigned long long v) {
#ifdef MPK_HOST_EMULATION
  ::mpk::emu::note_atomic(p, sizeof *p);
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#else
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// Relaxed store, gpu scope, 32 bits: atomic but orders nothing.
__device__ __forceinline__ void st_relaxed_gpu(uint32_t *p, uint32_t v) {
#ifdef MPK_HOST_EMULATION
  ::mpk::emu::note_atomic(p, sizeof *p);
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#else
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

// Acquire-release fence, gpu scope: orders this thread's accesses before it (and the writes it
// observed, e.g. the whole CTA's after a __syncthreads) before its accesses after it; followed by
// relaxed writes it is a release that synchronizes with an acquire load reading them.
__device__ __forceinline__ void fence_acq_rel_gpu() {
#ifdef MPK_HOST_EMULATION
  __atomic_thread_fence(__ATOMIC_ACQ_REL);
#else
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}

// Relaxed atomic add without a result, gpu scope: no increment is lost, but it orders nothing.
__device__ __forceinline__ void red_add_relaxed_gpu(unsigned long long *p, unsigned long long v) {
#ifdef MPK_HOST_EMULATION
  ::mpk::emu::note_atomic(p, sizeof *p);
  __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#else
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// Release atomic add without a result, gpu scope: this thread's earlier accesses are ordered before
// it; synchronizes with an acquire load that reads its sum or a value later atomic adds made of it.
__device__ __forceinline__ void red_add_release_gpu(unsigned long long *p, unsigned long long v) {
#ifdef MPK_HOST_EMULATION
  ::mpk::emu::note_atomic(p, sizeof *p);
  __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
#else
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// Acquire load, system scope: as ld_acquire_gpu, and it also synchronizes with a release by a thread
// of another GPU (or the host) whose write it reads, e.g. a peer rank's signal stored over NVLink.
__device__ __forceinline__ unsigned long long ld_acquire_sys(unsigned long long const *p) {
#ifdef MPK_HOST_EMULATION
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}

// Relaxed store, system scope: atomic and coherent for every GPU of the system (p may be another GPU's
// memory, mapped as peer memory) but orders nothing by itself; after fence_acq_rel_sys() it releases.
__device__ __forceinline__ void st_relaxed_sys(unsigned long long *p, unsigned long long v) {
#ifdef MPK_HOST_EMULATION
  ::mpk::emu::note_atomic(p, sizeof *p);
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#else
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

// Acquire-release fence, system scope: as fence_acq_rel_gpu, for observers on every GPU of the
// system: this thread's earlier accesses (and, after a __syncthreads, the CTA's), stores into peer
// memory included, are ordered before its later ones; followed by relaxed system-scope writes it is a
// release that synchronizes with a system-scope acquire load reading them, on any GPU.
__device__ __forceinline__ void fence_acq_rel_sys() {
#ifdef MPK_HOST_EMULATION
  __atomic_thread_fence(__ATOMIC_ACQ_REL);
#else
  asm volatile("fence.acq_rel.sys;" ::: "memory");
#endif
}

}  // namespace mpk
