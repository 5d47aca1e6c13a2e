// Tensor-core matrix multiply-accumulate of one warp (mma.sync, sm80 and later): the m16n8k16 shape
// with 16-bit inputs and fp32 accumulation, C (16x8) += A (16x16) * B (16x8), all 32 lanes taking
// part. Fragments are registers spread over the lanes as documented below (the PTX ISA's layout for
// .row.col), so a caller can load them straight from memory in that order.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace mpk {

// C += A * B with A 16x16 (m x k), B 16x8 (k x n), C 16x8 (m x n), all indexed [row][col]; T is
// __nv_bfloat16 or __half, products and sums in fp32 (C in place). Lane = 4 * g + t (g = lane / 4
// in 0..7, t = lane % 4 in 0..3). Each a / b register holds two elements of T, the first named one
// in its low 16 bits:
//   a0: A[g][2t..2t+1]    a1: A[g+8][2t..2t+1]    a2: A[g][2t+8..2t+9]    a3: A[g+8][2t+8..2t+9]
//   b0: B[2t..2t+1][g]    b1: B[2t+8..2t+9][g]
//   c[0], c[1]: C[g][2t..2t+1]                    c[2], c[3]: C[g+8][2t..2t+1]
#ifdef MPK_HOST_EMULATION
// (The host version also takes the caller's line, for its reports.)
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1, char const *file = __builtin_FILE(),
                                             int line = __builtin_LINE()) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "mma_m16n8k16: T must be __nv_bfloat16 or __half");
}
#else
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "mma_m16n8k16: T must be __nv_bfloat16 or __half");
}
#endif

#ifdef MPK_HOST_EMULATION
// Host version: a warp collective (emulation/block_runner.cpp's warp_exchange) to which every lane
// brings its fragments; once all 32 have arrived, D = A * B + C is computed in fp32 from the layout
// above, k summed in order 0..15 onto C (each product of two 16-bit values is exact in fp32). A lane
// that never arrives is reported as a warp collective mismatch, at the caller's line.
namespace emu_mma {

struct Fragments {
  uint32_t a[4], b[2];
  float c[4];
};

template <typename T>
__attribute__((no_sanitize_thread)) inline float element(uint32_t reg, int half) {
  uint16_t const bits = static_cast<uint16_t>(reg >> (16 * half));
  T v;
  memcpy(&v, &bits, sizeof v);
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else
    return __bfloat162float(v);
}

// Not instrumented for race checking (it runs between rounds, on payloads in the fibers' stacks), and
// optimized whatever the body's level: it is the emulator's hot spot in tensor-core bodies. Each D[i][j]
// still sums its k in order; products of 16-bit values are exact, so contraction changes nothing.
template <typename T>
__attribute__((no_sanitize_thread, optimize("O3"))) inline void combine(void const *const *ins, void *const *outs) {
  float A[16][16], B[16][8], D[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    Fragments const &f = *static_cast<Fragments const *>(ins[lane]);
    int const g = lane / 4, t = lane % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = element<T>(f.a[0], h);
      A[g + 8][2 * t + h] = element<T>(f.a[1], h);
      A[g][2 * t + 8 + h] = element<T>(f.a[2], h);
      A[g + 8][2 * t + 8 + h] = element<T>(f.a[3], h);
      B[2 * t + h][g] = element<T>(f.b[0], h);
      B[2 * t + 8 + h][g] = element<T>(f.b[1], h);
      D[g][2 * t + h] = f.c[h];
      D[g + 8][2 * t + h] = f.c[2 + h];
    }
  }
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k)
      for (int j = 0; j < 8; ++j) D[i][j] += A[i][k] * B[k][j];
  for (int lane = 0; lane < 32; ++lane) {
    float *c = static_cast<float *>(outs[lane]);
    int const g = lane / 4, t = lane % 4;
    c[0] = D[g][2 * t];
    c[1] = D[g][2 * t + 1];
    c[2] = D[g + 8][2 * t];
    c[3] = D[g + 8][2 * t + 1];
  }
}

template <typename T>
inline void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1,
                char const *file, int line) {
  Fragments const in{{a0, a1, a2, a3}, {b0, b1}, {c[0], c[1], c[2], c[3]}};
  ::mpk::emu::warp_exchange(::mpk::emu::Site{file, line}, "mma_m16n8k16", 0xffffffffu, &in, c, &combine<T>);
}

}  // namespace emu_mma

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                            uint32_t a3, uint32_t b0, uint32_t b1, char const *file,
                                                            int line) {
  emu_mma::mma<__nv_bfloat16>(c, a0, a1, a2, a3, b0, b1, file, line);
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                     uint32_t b0, uint32_t b1, char const *file, int line) {
  emu_mma::mma<__half>(c, a0, a1, a2, a3, b0, b1, file, line);
}
#else
template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                            uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                     uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#endif

}  // namespace mpk
