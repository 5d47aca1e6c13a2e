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
// __syncwarp order memory among the threads they synchronize; shuffles, votes, warp reductions and
// matches synchronize the lanes of their mask but order no memory. Device math (rsqrtf, __expf, ...)
// is computed with the host's libm: the same function, not the same bits.
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

// __reduce_*_sync (redux.sync): every lane of the mask gets op over the values of the mask's lanes.
// The op is a type, so that each reduction is its own collective: lanes of one warp at two different
// reductions are a mismatch, as on the device.
struct ReduceAdd {
  template <typename T>
  T operator()(T a, T b) const {  // wraps, as redux.sync.add does: the sum in unsigned arithmetic
    return static_cast<T>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
  }
};
struct ReduceMin {
  template <typename T>
  T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct ReduceMax {
  template <typename T>
  T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct ReduceAnd {
  template <typename T>
  T operator()(T a, T b) const {
    return a & b;
  }
};
struct ReduceOr {
  template <typename T>
  T operator()(T a, T b) const {
    return a | b;
  }
};
struct ReduceXor {
  template <typename T>
  T operator()(T a, T b) const {
    return a ^ b;
  }
};

template <typename T, typename Op>
void reduce_lanes(void const *const *ins, void *const *outs) {
  bool any = false;
  T acc{};
  for (int lane = 0; lane < 32; ++lane) {
    if (!ins[lane]) continue;  // not in the mask
    T const v = *static_cast<T const *>(ins[lane]);
    acc = any ? Op()(acc, v) : v;
    any = true;
  }
  for (int lane = 0; lane < 32; ++lane)
    if (outs[lane]) *static_cast<T *>(outs[lane]) = acc;
}

// CUDA declares add, min and max for int and unsigned, and and / or / xor for unsigned only.
template <typename Op, typename V>
inline auto warp_reduce_sync(Site site, char const *name, unsigned mask, V value) {
  static_assert(std::is_integral_v<V> && sizeof(V) <= 4, "__reduce_*_sync takes an int or unsigned value");
  using T = std::conditional_t<std::is_signed_v<V>, int, unsigned>;
  T const in = static_cast<T>(value);
  T out;
  warp_exchange(site, name, mask, &in, &out, &reduce_lanes<T, Op>);
  return out;
}
template <typename Op>
inline unsigned warp_reduce_bits_sync(Site site, char const *name, unsigned mask, unsigned value) {
  unsigned out;
  warp_exchange(site, name, mask, &value, &out, &reduce_lanes<unsigned, Op>);
  return out;
}

// __match_any_sync / __match_all_sync (match.sync on the value's 32 or 64 bits): each lane of the mask
// gets the lanes of the mask whose value has the same bits; all: the mask if every lane's does, else 0.
struct MatchOut {
  unsigned lanes;
  int all;
};
// kAll only tells the two matches apart as collectives (each its own combine): the result is the same.
template <typename Bits, bool kAll>
void match_lanes(void const *const *ins, void *const *outs) {
  unsigned mask = 0;
  for (int lane = 0; lane < 32; ++lane)
    if (ins[lane]) mask |= 1u << lane;
  for (int lane = 0; lane < 32; ++lane) {
    if (!ins[lane]) continue;
    Bits const mine = *static_cast<Bits const *>(ins[lane]);
    unsigned same = 0;
    for (int other = 0; other < 32; ++other)
      if (ins[other] && *static_cast<Bits const *>(ins[other]) == mine) same |= 1u << other;
    *static_cast<MatchOut *>(outs[lane]) = MatchOut{same, same == mask};
  }
}
template <bool kAll, typename V>
inline MatchOut match_sync(Site site, char const *name, unsigned mask, V value) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "__match_*_sync takes a 32- or 64-bit value");
  using Bits = std::conditional_t<sizeof(V) == 4, uint32_t, uint64_t>;
  Bits in;
  memcpy(&in, &value, sizeof in);
  MatchOut out;
  warp_exchange(site, name, mask, &in, &out, &match_lanes<Bits, kAll>);
  return out;
}
template <typename V>
inline unsigned match_all_sync(Site site, unsigned mask, V value, int *pred) {
  MatchOut const out = match_sync<true>(site, "__match_all_sync", mask, value);
  *pred = out.all;
  return out.all ? out.lanes : 0u;
}

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
#define __reduce_add_sync(m, v) \
  ::mpk::emu::warp_reduce_sync<::mpk::emu::ReduceAdd>(MPK_EMU_SITE, "__reduce_add_sync", (m), (v))
#define __reduce_min_sync(m, v) \
  ::mpk::emu::warp_reduce_sync<::mpk::emu::ReduceMin>(MPK_EMU_SITE, "__reduce_min_sync", (m), (v))
#define __reduce_max_sync(m, v) \
  ::mpk::emu::warp_reduce_sync<::mpk::emu::ReduceMax>(MPK_EMU_SITE, "__reduce_max_sync", (m), (v))
#define __reduce_and_sync(m, v) \
  ::mpk::emu::warp_reduce_bits_sync<::mpk::emu::ReduceAnd>(MPK_EMU_SITE, "__reduce_and_sync", (m), (v))
#define __reduce_or_sync(m, v) \
  ::mpk::emu::warp_reduce_bits_sync<::mpk::emu::ReduceOr>(MPK_EMU_SITE, "__reduce_or_sync", (m), (v))
#define __reduce_xor_sync(m, v) \
  ::mpk::emu::warp_reduce_bits_sync<::mpk::emu::ReduceXor>(MPK_EMU_SITE, "__reduce_xor_sync", (m), (v))
#define __match_any_sync(m, v) ::mpk::emu::match_sync<false>(MPK_EMU_SITE, "__match_any_sync", (m), (v)).lanes
#define __match_all_sync(m, v, pred) ::mpk::emu::match_all_sync(MPK_EMU_SITE, (m), (v), (pred))
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
