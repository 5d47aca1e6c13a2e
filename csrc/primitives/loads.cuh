// 16-byte global memory accesses for task bodies. Plain (coherent) accesses by default: a slice may
// have been written by another task of the same launch, which the runtime's acquire makes visible,
// but the read-only (.nc) path would not. ld_stream_16 is for data read once (weights). On the host
// (MPK_HOST_EMULATION) all of them are plain 16-byte accesses, which a race-checking run checks for
// alignment as the device does.
#pragma once
#include <stdint.h>

namespace mpk {

// 16-byte load that does not allocate in L1 (weights: read once, so they evict nothing that is
// reused); otherwise an ordinary weak load, not the read-only .nc path.
__device__ __forceinline__ uint4 ld_stream_16(void const *p) {
#ifdef MPK_HOST_EMULATION
  return *reinterpret_cast<uint4 const *>(p);  // cache hints mean nothing on the host
#else
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

// 16-byte load cached in L2 only (.cg, p 16-byte aligned): for data another GPU stored into this
// GPU's memory (peer stores land in its L2), so that no line this SM cached earlier in L1 can answer.
__device__ __forceinline__ uint4 ld_cg_16(void const *p) {
#ifdef MPK_HOST_EMULATION
  return *reinterpret_cast<uint4 const *>(p);  // one memory on the host: nothing to bypass
#else
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");  // never hoisted above the barrier that follows the signals' acquire
  return v;
#endif
}

// Plain 16-byte load (p 16-byte aligned).
__device__ __forceinline__ uint4 ld_16(void const *p) { return *reinterpret_cast<uint4 const *>(p); }

// Plain 16-byte store (p 16-byte aligned).
__device__ __forceinline__ void st_16(void *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }

}  // namespace mpk
