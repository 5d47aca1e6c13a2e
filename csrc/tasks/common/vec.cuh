// 16-byte vector access for task bodies: load 16 bytes of T as floats, store floats back as T.
// Plain (coherent) loads: a slice may have been written by another task of the same launch,
// which the runtime's acquire makes visible, but the read-only (.nc) path would not.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mpk {

template <typename T>
constexpr int kVec16 = 16 / sizeof(T);

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

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

template <typename T>
__device__ __forceinline__ void load16(T const *p, float (&out)[kVec16<T>]) {
  union {
    uint4 raw;
    T v[kVec16<T>];
  } u;
  u.raw = *reinterpret_cast<uint4 const *>(p);
#pragma unroll
  for (int k = 0; k < kVec16<T>; ++k) out[k] = to_float(u.v[k]);
}

template <typename T>
__device__ __forceinline__ void store16(T *p, float const (&in)[kVec16<T>]) {
  union {
    uint4 raw;
    T v[kVec16<T>];
  } u;
#pragma unroll
  for (int k = 0; k < kVec16<T>; ++k) u.v[k] = from_float<T>(in[k]);
  *reinterpret_cast<uint4 *>(p) = u.raw;
}

}  // namespace mpk
