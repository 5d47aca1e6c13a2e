// Reductions across the 32 lanes of a warp, with shuffles or redux.sync (no shared memory): every
// lane gets the result. The reduction operators live here too, for warp_reduce and block_reduce alike.
#pragma once
#include "runtime/config.cuh"

namespace mpk {

// a + b.
struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

// The larger of a and b (b when they compare equal or unordered).
struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// op over the v of all 32 lanes (a butterfly: xor distances 16, 8, 4, 2, 1); the whole warp must
// call it, and every lane gets the result. op must be associative and commutative.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The largest v of the 32 lanes, in every lane, by two redux.sync (sm80 and up): the largest high
// half, then the largest low half among the lanes that hold it. Five 64-bit shuffle steps otherwise.
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  unsigned const hi = __reduce_max_sync(0xffffffffu, static_cast<unsigned>(v >> 32));
  unsigned const lo =
      __reduce_max_sync(0xffffffffu, static_cast<unsigned>(v >> 32) == hi ? static_cast<unsigned>(v) : 0u);
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// The sum of v over the 32 lanes, in every lane.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  return warp_reduce(v, SumOp());
}

}  // namespace mpk
