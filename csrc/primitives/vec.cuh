// Element conversions and 16-byte vectors of 16- and 32-bit floats for task bodies: load 16 bytes
// of T as floats, store floats back as T (round to nearest even), through ld_16 / st_16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "primitives/loads.cuh"

namespace mpk {

// Elements of T in 16 bytes.
template <typename T>
constexpr int kVec16 = 16 / sizeof(T);

// Exact widening to fp32.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// fp32 to T, rounding to nearest even.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// out[k] = p[k] for the kVec16<T> elements at p (16-byte aligned), one plain 16-byte load.
template <typename T>
__device__ __forceinline__ void load16(T const *p, float (&out)[kVec16<T>]) {
  union {
    uint4 raw;
    T v[kVec16<T>];
  } u;
  u.raw = ld_16(p);
#pragma unroll
  for (int k = 0; k < kVec16<T>; ++k) out[k] = to_float(u.v[k]);
}

// p[k] = in[k] rounded to T for the kVec16<T> elements at p (16-byte aligned), one 16-byte store.
template <typename T>
__device__ __forceinline__ void store16(T *p, float const (&in)[kVec16<T>]) {
  union {
    uint4 raw;
    T v[kVec16<T>];
  } u;
#pragma unroll
  for (int k = 0; k < kVec16<T>; ++k) u.v[k] = from_float<T>(in[k]);
  st_16(p, u.raw);
}

}  // namespace mpk
