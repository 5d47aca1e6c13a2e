// Test stand-in for csrc/primitives/cp_async.cuh on the host (test_emu_paged_attention.py only,
// until the primitives have host versions of their own): the copy happens at issue, the waits are
// no-ops. A body that reads a tile before its wait is therefore not caught here.
#pragma once
#include <stdint.h>

namespace mpk {

__device__ __forceinline__ void cp_async_16(void *dst, void const *src) {
  *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<uint4 const *>(src);
}
__device__ __forceinline__ void cp_async_16_zfill(void *dst, void const *src, bool full) {
  *reinterpret_cast<uint4 *>(dst) = full ? *reinterpret_cast<uint4 const *>(src) : uint4{0, 0, 0, 0};
}
__device__ __forceinline__ void cp_async_commit() {}
__device__ __forceinline__ void cp_async_wait_all() {}
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {}

}  // namespace mpk
