// The CUDA that task bodies use, for a host build: g++ -DMPK_HOST_EMULATION -include
// emulation/cuda_shim.h, with the CUDA toolkit's include directory on the path (its cuda_bf16.h and
// cuda_fp16.h compile as host code and give __nv_bfloat16 / __half with host conversions).
//
// The threads of one block are fibers on one OS thread (emulation/block_runner.cpp). Everything a
// thread shares with others lives where a fiber switch cannot hide it: __shared__ variables are
// thread_local (per OS thread, so shared by the fibers of the block it runs; thread_local rather than
// static because `extern __shared__` must stay valid), and threadIdx reads the running fiber's view.
// Every barrier, warp collective and __nanosleep is a macro that passes its call site (__FILE__,
// __LINE__) to the runner, which switches fibers there and names the site in its reports.
//
// Semantics follow the CUDA programming guide and the PTX ISA: atomics are relaxed; __syncthreads and
// __syncwarp order memory among the threads they synchronize; shuffles and votes synchronize the
// lanes of their mask but order no memory. Device math (rsqrtf, __expf, ...) is computed with the
// host's libm: the same function, not the same bits.
#pragma once

#ifndef MPK_HOST_EMULATION
#error "emulation/cuda_shim.h is the host build's CUDA; compile with -DMPK_HOST_EMULATION"
#endif

// Before the toolkit headers: host_defines.h keeps a definition it finds.
#define __host__
#define __device__
#define __global__
#define __grid_constant__
#define __constant__ const
#define __shared__ thread_local
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>
#undef __forceinline__
#define __forceinline__ inline
#define __launch_bounds__(...)

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "emulation/shim_api.h"

namespace mpk {
namespace emu {

template <typename T>
inline T shfl(Site site, int kind, unsigned mask, T var, int arg, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "a shuffle moves a 1- to 8-byte value");
  uint64_t bits = 0;
  memcpy(&bits, &var, sizeof(T));
  bits = warp_collective(site, kind, mask, bits, arg, width);
  std::remove_cv_t<T> out;
  memcpy(&out, &bits, sizeof(T));
  return out;
}

inline unsigned vote(Site site, int kind, unsigned mask, int pred) {
  return static_cast<unsigned>(warp_collective(site, kind, mask, pred != 0, 0, 32));
}

// __syncwarp(mask = all lanes), as an object so that the macro works with and without the mask.
struct SyncwarpAt {
  Site site;
  void operator()(unsigned mask = 0xffffffffu) const { warp_collective(site, kSyncwarp, mask, 0, 0, 32); }
};

template <typename T>
struct Same {
  using type = T;
};
template <typename T>
using NoDeduce = typename Same<T>::type;

// A read-modify-write by compare-and-swap on the value's bits (min, max, float add, inc, dec).
template <typename T, typename F>
inline T atomic_update(T *p, F f) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics are 32- or 64-bit");
  note_atomic(p, sizeof(T));
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  Bits *b = reinterpret_cast<Bits *>(p);
  Bits old = __atomic_load_n(b, __ATOMIC_RELAXED);
  for (;;) {
    T cur, next;
    memcpy(&cur, &old, sizeof(T));
    next = f(cur);
    Bits nb;
    memcpy(&nb, &next, sizeof(T));
    if (__atomic_compare_exchange_n(b, &old, nb, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return cur;
  }
}

template <typename T>
constexpr bool kAtomicInt = std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8);

}  // namespace emu
}  // namespace mpk

#define MPK_EMU_SITE (::mpk::emu::Site{__FILE__, __LINE__})

#define threadIdx (::mpk::emu::tls_view->thread_idx)
#define blockIdx (::mpk::emu::tls_view->block_idx)
#define blockDim (::mpk::emu::tls_view->block_dim)
#define gridDim (::mpk::emu::tls_view->grid_dim)
constexpr int warpSize = 32;

#define __syncthreads() ((void)::mpk::emu::barrier(MPK_EMU_SITE, ::mpk::emu::kSyncthreads, 1))
#define __syncthreads_count(p) ::mpk::emu::barrier(MPK_EMU_SITE, ::mpk::emu::kSyncthreadsCount, (p) != 0)
#define __syncthreads_and(p) ::mpk::emu::barrier(MPK_EMU_SITE, ::mpk::emu::kSyncthreadsAnd, (p) != 0)
#define __syncthreads_or(p) ::mpk::emu::barrier(MPK_EMU_SITE, ::mpk::emu::kSyncthreadsOr, (p) != 0)
#define __syncwarp(...) ::mpk::emu::SyncwarpAt{MPK_EMU_SITE}(__VA_ARGS__)
#define __shfl_sync(...) ::mpk::emu::shfl(MPK_EMU_SITE, ::mpk::emu::kShflIdx, __VA_ARGS__)
#define __shfl_up_sync(...) ::mpk::emu::shfl(MPK_EMU_SITE, ::mpk::emu::kShflUp, __VA_ARGS__)
#define __shfl_down_sync(...) ::mpk::emu::shfl(MPK_EMU_SITE, ::mpk::emu::kShflDown, __VA_ARGS__)
#define __shfl_xor_sync(...) ::mpk::emu::shfl(MPK_EMU_SITE, ::mpk::emu::kShflXor, __VA_ARGS__)
#define __ballot_sync(m, p) ::mpk::emu::vote(MPK_EMU_SITE, ::mpk::emu::kBallot, (m), (p))
#define __any_sync(m, p) static_cast<int>(::mpk::emu::vote(MPK_EMU_SITE, ::mpk::emu::kAny, (m), (p)))
#define __all_sync(m, p) static_cast<int>(::mpk::emu::vote(MPK_EMU_SITE, ::mpk::emu::kAll, (m), (p)))
#define __nanosleep(ns) ::mpk::emu::yield(MPK_EMU_SITE)
#define __trap() ::mpk::emu::trap(MPK_EMU_SITE, "__trap()")

// Fences: the fibers of a block share one OS thread, so a fence only has to stop the compiler.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

inline size_t __cvta_generic_to_shared(void const *p) { return ::mpk::emu::cvta_generic_to_shared(p); }
inline long long clock64() { return static_cast<long long>(::mpk::emu::clock_ticks()); }
template <typename T>
inline T __ldg(T const *p) {
  return *p;
}

// Atomics, relaxed like CUDA's. They go through __atomic builtins so that a race-checking build
// sees them as atomic accesses (and so that blocks on several OS threads stay correct).
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicAdd(T *p, ::mpk::emu::NoDeduce<T> v) {
  ::mpk::emu::note_atomic(p, sizeof(T));
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
inline T atomicAdd(T *p, ::mpk::emu::NoDeduce<T> v) {
  return ::mpk::emu::atomic_update(p, [v](T a) { return a + v; });
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicSub(T *p, ::mpk::emu::NoDeduce<T> v) {
  ::mpk::emu::note_atomic(p, sizeof(T));
  return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicAnd(T *p, ::mpk::emu::NoDeduce<T> v) {
  ::mpk::emu::note_atomic(p, sizeof(T));
  return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicOr(T *p, ::mpk::emu::NoDeduce<T> v) {
  ::mpk::emu::note_atomic(p, sizeof(T));
  return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicXor(T *p, ::mpk::emu::NoDeduce<T> v) {
  ::mpk::emu::note_atomic(p, sizeof(T));
  return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T> || std::is_floating_point_v<T>, int> = 0>
inline T atomicExch(T *p, ::mpk::emu::NoDeduce<T> v) {
  return ::mpk::emu::atomic_update(p, [v](T) { return v; });
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicMax(T *p, ::mpk::emu::NoDeduce<T> v) {
  return ::mpk::emu::atomic_update(p, [v](T a) { return a > v ? a : v; });
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicMin(T *p, ::mpk::emu::NoDeduce<T> v) {
  return ::mpk::emu::atomic_update(p, [v](T a) { return a < v ? a : v; });
}
template <typename T, std::enable_if_t<::mpk::emu::kAtomicInt<T>, int> = 0>
inline T atomicCAS(T *p, ::mpk::emu::NoDeduce<T> compare, ::mpk::emu::NoDeduce<T> v) {
  ::mpk::emu::note_atomic(p, sizeof(T));
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value, whether or not it was replaced
}
inline unsigned atomicInc(unsigned *p, unsigned limit) {
  return ::mpk::emu::atomic_update(p, [limit](unsigned a) { return a >= limit ? 0u : a + 1; });
}
inline unsigned atomicDec(unsigned *p, unsigned limit) {
  return ::mpk::emu::atomic_update(p, [limit](unsigned a) { return a == 0 || a > limit ? limit : a - 1; });
}

// Device math on the host's libm.
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float exp10f(float x) { return powf(10.f, x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float_as_int(float x) {
  int i;
  memcpy(&i, &x, 4);
  return i;
}
inline unsigned __float_as_uint(float x) {
  unsigned i;
  memcpy(&i, &x, 4);
  return i;
}
inline float __int_as_float(int i) {
  float x;
  memcpy(&x, &i, 4);
  return x;
}
inline float __uint_as_float(unsigned i) {
  float x;
  memcpy(&x, &i, 4);
  return x;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(static_cast<unsigned>(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll(static_cast<unsigned long long>(x)) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}

// CUDA's min / max: one overload set for every pair of arithmetic types, in the common type;
// floating point as fminf / fmaxf (a NaN loses to a number).
template <typename A, typename B, std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>, int> = 0>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return fmin(static_cast<C>(a), static_cast<C>(b));
  else
    return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B, std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>, int> = 0>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return fmax(static_cast<C>(a), static_cast<C>(b));
  else
    return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
