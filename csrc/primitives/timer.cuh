// Time on the device: the global nanosecond timer (comparable across SMs, so profiler records and
// the watchdog's idle time are in one clock) and a bounded sleep for polling loops.
#pragma once

namespace mpk {

// %globaltimer: nanoseconds, one clock for every SM of the device; 64 bits, so it never wraps.
__device__ __forceinline__ unsigned long long global_timer_ns() {
#ifdef MPK_HOST_EMULATION
  return ::mpk::emu::global_timer_ns();  // the host's steady clock, in ns
#else
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

// Suspends the calling thread for about `ns` nanoseconds (at most 1 ms; the hardware may wake it sooner).
// On the host the fiber yields to the block's other threads (emulation/cuda_shim.h's __nanosleep).
__device__ __forceinline__ void sleep_ns(unsigned ns) { __nanosleep(ns); }

}  // namespace mpk
