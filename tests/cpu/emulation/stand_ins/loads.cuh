// Test stand-in for csrc/primitives/loads.cuh on the host (test_emu_paged_attention.py only, until
// the primitives have host versions of their own): plain 16-byte accesses.
#pragma once
#include <stdint.h>

namespace mpk {

__device__ __forceinline__ uint4 ld_stream_16(void const *p) { return *reinterpret_cast<uint4 const *>(p); }
__device__ __forceinline__ uint4 ld_16(void const *p) { return *reinterpret_cast<uint4 const *>(p); }
__device__ __forceinline__ void st_16(void *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }

}  // namespace mpk
