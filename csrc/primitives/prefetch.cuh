// Prefetch hints for task bodies: start moving global memory toward the L2 cache without waiting
// and without a register result, so that a later load of it hits L2 (or joins the fetch in
// flight). A hint only: results never depend on it. The host emulation reads one byte of the
// line instead, so that a hint outside the task's tensors is reported as the bad read it would be
// on a device (emulation/faults.cpp, race_check.cpp).
#pragma once
#include <stddef.h>

#include "runtime/config.cuh"

namespace mpk {

constexpr int kL2LineBytes = 128;
// What one task's prefetch asks for at most: a worker per SM, so all of them together stay well
// inside an H100's 50 MB L2 (the rest of a bigger slice streams behind the body's own loads).
constexpr size_t kPrefetchBudgetBytes = 256 << 10;

// Prefetches the cache line holding p (global memory) into L2.
__device__ __forceinline__ void prefetch_l2(void const *p) {
#ifdef MPK_HOST_EMULATION
  (void)*static_cast<volatile char const *>(p);
#else
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// Every thread of the CTA: prefetches the lines of [p, p + bytes) into L2, one line per thread in
// turn. Issuing costs a few instructions per thread for the 100 KB a typical task reads.
__device__ __forceinline__ void prefetch_l2_range(void const *p, size_t bytes) {
  char const *c = static_cast<char const *>(p);
  for (size_t off = static_cast<size_t>(threadIdx.x) * kL2LineBytes; off < bytes; off += kWorkerThreads * kL2LineBytes)
    prefetch_l2(c + off);
}

}  // namespace mpk
