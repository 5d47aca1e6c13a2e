// Tensor-core matrix multiply-accumulate of one warp (mma.sync, sm80 and later): the m16n8k16 shape
// with 16-bit inputs and fp32 accumulation, C (16x8) += A (16x16) * B (16x8), all 32 lanes taking
// part. Fragments are registers spread over the lanes as documented below (the PTX ISA's layout for
// .row.col), so a caller can load them straight from memory in that order.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

namespace mpk {

// C += A * B with A 16x16 (m x k), B 16x8 (k x n), C 16x8 (m x n), all indexed [row][col]; T is
// __nv_bfloat16 or __half, products and sums in fp32 (C in place). Lane = 4 * g + t (g = lane / 4
// in 0..7, t = lane % 4 in 0..3). Each a / b register holds two elements of T, the first named one
// in its low 16 bits:
//   a0: A[g][2t..2t+1]    a1: A[g+8][2t..2t+1]    a2: A[g][2t+8..2t+9]    a3: A[g+8][2t+8..2t+9]
//   b0: B[2t..2t+1][g]    b1: B[2t+8..2t+9][g]
//   c[0], c[1]: C[g][2t..2t+1]                    c[2], c[3]: C[g+8][2t..2t+1]
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "mma_m16n8k16: T must be __nv_bfloat16 or __half");
}

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

}  // namespace mpk
