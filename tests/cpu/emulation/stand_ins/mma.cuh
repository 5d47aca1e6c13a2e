// Test stand-in for csrc/primitives/mma.cuh on the host, used by test_emu_paged_attention.py only
// until the primitives have host versions of their own (issue 16): the warp's fragments gathered
// with shuffles and multiplied in fp32, following the layout mma.cuh documents.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace mpk {

template <typename T>
inline float fragment_element(uint32_t reg, int high) {
  uint16_t const bits = high ? static_cast<uint16_t>(reg >> 16) : static_cast<uint16_t>(reg & 0xffffu);
  T v;
  memcpy(&v, &bits, sizeof bits);
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return __half2float(v);
}

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  int const lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float a[2][16], b[2][16];  // rows g, g + 8 of A; columns 2t, 2t + 1 of B
  for (int q = 0; q < 4; ++q) {
    uint32_t const x0 = __shfl_sync(0xffffffffu, a0, 4 * g + q), x1 = __shfl_sync(0xffffffffu, a1, 4 * g + q);
    uint32_t const x2 = __shfl_sync(0xffffffffu, a2, 4 * g + q), x3 = __shfl_sync(0xffffffffu, a3, 4 * g + q);
    for (int h = 0; h < 2; ++h) {
      a[0][2 * q + h] = fragment_element<T>(x0, h), a[0][2 * q + 8 + h] = fragment_element<T>(x2, h);
      a[1][2 * q + h] = fragment_element<T>(x1, h), a[1][2 * q + 8 + h] = fragment_element<T>(x3, h);
    }
  }
  for (int n = 0; n < 2; ++n)
    for (int q = 0; q < 4; ++q) {
      int const src = 4 * (2 * t + n) + q;
      uint32_t const y0 = __shfl_sync(0xffffffffu, b0, src), y1 = __shfl_sync(0xffffffffu, b1, src);
      for (int h = 0; h < 2; ++h) b[n][2 * q + h] = fragment_element<T>(y0, h), b[n][2 * q + 8 + h] = fragment_element<T>(y1, h);
    }
  for (int r = 0; r < 2; ++r)
    for (int n = 0; n < 2; ++n) {
      float s = 0.f;
      for (int k = 0; k < 16; ++k) s += a[r][k] * b[n][k];
      c[2 * r + n] += s;
    }
}

}  // namespace mpk
