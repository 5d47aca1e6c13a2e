// Prefetch hints for task bodies: start moving global memory toward the L2 cache without waiting
// and without a register result, so that a later load of it hits L2 (or joins the fetch in
// flight). A hint only: results never depend on it. The host emulation reads one byte of the
// line instead, so that a hint outside the task's tensors is reported as the bad read it would be
// on a device (emulation/faults.cpp, race_check.cpp).
#pragma once

namespace mpk {

// Prefetches the cache line holding p (global memory) into L2.
__device__ __forceinline__ void prefetch_l2(void const *p) {
#ifdef MPK_HOST_EMULATION
  (void)*static_cast<volatile char const *>(p);
#else
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

}  // namespace mpk
