// Warp jitter: what the test harness builds with (KernelParams warp_jitter=True, which puts
// `#define MPK_WARP_JITTER 1` at the top of the generated source). After every __syncthreads() of
// the worker and of every task body, a warp in kJitterOneIn sleeps a while, so the warps of a CTA
// drift apart as far as a slow memory access or a busy SM would let them. A barrier that a body
// needs but lacks then lets a warp that ran ahead overwrite shared memory a sleeping warp has yet to
// read (or thread 0 publish a task whose other warps are still writing), and the output shows it:
// on the device a missing barrier otherwise changes results only now and then. Correct code gives
// the same results, a little later. The emulator's counterpart is the warp that lags between two
// barriers (emulation/block_runner.cpp); a host build ignores this file.
//
// __syncthreads() (and its _and, _or, _count forms) is redefined as a macro for the code included
// after this header (at the end of runtime/task_api.cuh): every task header includes task_api.cuh
// first, and the runtime comes last in the translation unit.
#pragma once
#if defined(MPK_WARP_JITTER) && !defined(MPK_HOST_EMULATION)
#include <stdint.h>

namespace mpk {
namespace detail {

constexpr uint32_t kJitterOneIn = 4;         // a warp sleeps after one barrier in this many
constexpr uint32_t kJitterMinNs = 500;       // longer than a shared-memory round trip
constexpr uint32_t kJitterSpreadNs = 8000;   // and up to this much more: a global load or two

__device__ __forceinline__ uint32_t jitter_hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return static_cast<uint32_t>(x ^ (x >> 33));
}

// After a barrier: one draw per warp (its first active lane's), so the warp sleeps as a whole.
__device__ __forceinline__ void warp_jitter() {
  unsigned const active = __activemask();
  uint64_t const mine =
      clock64() ^ (static_cast<uint64_t>(blockIdx.x) << 40) ^ (static_cast<uint64_t>(threadIdx.x / 32) << 32);
  uint32_t const draw = __shfl_sync(active, jitter_hash(mine), __ffs(active) - 1);
  if (draw % kJitterOneIn == 0) __nanosleep(kJitterMinNs + (draw / kJitterOneIn) % kJitterSpreadNs);
}

__device__ __forceinline__ int after_barrier(int result) {
  warp_jitter();
  return result;
}

}  // namespace detail
}  // namespace mpk

// A macro's own name is not expanded again inside it: these call the real barriers.
#define __syncthreads() (__syncthreads(), ::mpk::detail::warp_jitter())
#define __syncthreads_and(predicate) ::mpk::detail::after_barrier(__syncthreads_and(predicate))
#define __syncthreads_or(predicate) ::mpk::detail::after_barrier(__syncthreads_or(predicate))
#define __syncthreads_count(predicate) ::mpk::detail::after_barrier(__syncthreads_count(predicate))
#endif
