// TMA tensor copies and the mbarriers that count them (sm90 and later). One thread starts a copy of
// a box of a tensor (up to 4 dims here) from global to shared memory, described by a CUtensorMap the
// host encoded; the copy's bytes complete the transaction count of an mbarrier in shared memory,
// whose phase completes once its expected arrivals are in and every announced byte has landed.
// Threads wait on a phase by its parity: phases alternate 0, 1, 0, ..., so a barrier reused for
// stage after stage is waited on with parity 0, then 1, and so on.
//
// Below sm90 these instructions do not exist: callers reach them only under
// `if constexpr (kTargetSm >= 90)`, and sm80 device code compiles them to traps.
#pragma once
#include <stdint.h>

namespace mpk {

// A CUtensorMap the host encoded (128 bytes, 64-byte aligned), in global memory. The emulator reads
// only the geometry graph/tensor_maps.py writes there for CPU tensors, to compare it with the body's.
struct alignas(64) TensorMap {
  unsigned char bytes[128];
};

// What the host emulator copies instead of decoding a map: the same geometry the host encoded.
// Dim 0 is contiguous; strides are in bytes for dims 1..3; box = elements per dim; swizzle128: the
// destination's 16-byte chunks are XOR-ed as CU_TENSOR_MAP_SWIZZLE_128B does (bits 4..6 of the shared
// address ^= bits 7..9). Elements outside dims (coordinate < 0 or >= dim) land as zeros and count.
struct TmaGeometry4 {
  void const *base;
  int elem_bytes;
  int dims[4];
  long long strides[3];
  int box[4];
  bool swizzle128;
};

#ifdef MPK_HOST_EMULATION
// Host versions (emulation/tma.cpp): the runner keeps each barrier's state; a copy is
// queued on its barrier and lands at a wait on it (until then the destination keeps what it held,
// and a race-checking run reports any access to it). A wait that can never complete, a barrier this
// task did not initialize, a destination outside shared memory or not 128-byte aligned, and more
// bytes landing than were announced stop the run with a report naming the caller's line; so do an
// init of a barrier that is still valid and a barrier still valid when the task ends.
__device__ __forceinline__ void mbarrier_init(uint64_t *bar, unsigned arrivals, char const *file = __builtin_FILE(),
                                              int line = __builtin_LINE()) {
  ::mpk::emu::mbarrier_init({file, line}, bar, arrivals);
}
__device__ __forceinline__ void mbarrier_inval(uint64_t *bar, char const *file = __builtin_FILE(),
                                               int line = __builtin_LINE()) {
  ::mpk::emu::mbarrier_inval({file, line}, bar);
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t *bar, unsigned bytes,
                                                          char const *file = __builtin_FILE(),
                                                          int line = __builtin_LINE()) {
  ::mpk::emu::mbarrier_arrive_expect_tx({file, line}, bar, bytes);
}
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t *bar, unsigned parity,
                                                     char const *file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::mpk::emu::mbarrier_wait_parity({file, line}, bar, parity);
}
__device__ __forceinline__ void tma_load_4d(void *smem_dst, TensorMap const *map, TmaGeometry4 const &emu, int c0,
                                            int c1, int c2, int c3, uint64_t *bar, char const *file = __builtin_FILE(),
                                            int line = __builtin_LINE()) {
  ::mpk::emu::TmaBox box{emu.base, 4, emu.elem_bytes, {}, {}, {}, {c0, c1, c2, c3}, emu.swizzle128};
  for (int d = 0; d < 4; ++d) {
    box.dims[d] = emu.dims[d];
    box.box[d] = emu.box[d];
  }
  for (int d = 0; d < 3; ++d) box.strides[d] = emu.strides[d];
  ::mpk::emu::tma_load({file, line}, smem_dst, box, map, bar);
}
// The proxies are one here: only the compiler has to keep the accesses in order.
__device__ __forceinline__ void fence_proxy_async() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
// sm80 device code: never called (see the top of the file), so a trap if it is.
__device__ __forceinline__ void mbarrier_init(uint64_t *, unsigned) { __trap(); }
__device__ __forceinline__ void mbarrier_inval(uint64_t *) { __trap(); }
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t *, unsigned) { __trap(); }
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t *, unsigned) { __trap(); }
__device__ __forceinline__ void tma_load_4d(void *, TensorMap const *, TmaGeometry4 const &, int, int, int, int,
                                            uint64_t *) {
  __trap();
}
__device__ __forceinline__ void fence_proxy_async() { __trap(); }
#else
// Initializes the barrier for `arrivals` arrivals a phase (1 to 2^20 - 1), phase 0, tx-count 0.
// The fences make the init visible to the async proxy (the copies' complete_tx) and to the cluster;
// other threads of the CTA need a barrier (__syncthreads, or __syncwarp within the warp) before
// they use it.
__device__ __forceinline__ void mbarrier_init(uint64_t *bar, unsigned arrivals) {
  uint32_t const b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n\t"
      "fence.mbarrier_init.release.cluster;\n\t"
      "fence.proxy.async.shared::cta;" ::"r"(b),
      "r"(arrivals)
      : "memory");
}

// Ends the barrier's life (no waiter and no copy may still count on it): the PTX ISA makes an init of
// a valid mbarrier, or another use of its memory (the next task's shared memory), undefined before it.
__device__ __forceinline__ void mbarrier_inval(uint64_t *bar) {
  uint32_t const b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(b) : "memory");
}

// One arrival on the current phase, after announcing `bytes` more that copies will bring (release:
// this thread's earlier accesses are visible to whoever sees the phase complete).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t *bar, unsigned bytes) {
  uint32_t const b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
}

// Returns once the phase of parity `parity` (0 or 1) has completed: the current phase if it has that
// parity, else the one before it, which has. Acquire: the copies that completed it, and the accesses
// the arriving threads made before arriving, are visible afterwards.
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t *bar, unsigned parity) {
  uint32_t const b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  // The retry loop inside the asm: to the compiler one instruction, not a loop in the caller's loop,
  // which cost the attention body's math loop spilled registers (ptxas -v).
  asm volatile(
      "{\n\t.reg .pred p;\n"
      "MPK_MBARRIER_WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra MPK_MBARRIER_WAIT_%=;\n\t}" ::"r"(b),
      "r"(parity)
      : "memory");
}

// Starts copying the box at coordinates (c0, c1, c2, c3) (dim 0 first, in elements; a box reaching
// outside the tensor lands zeros there) of the tensor `map` describes into smem_dst (128-byte
// aligned), dense in the box's order (swizzled as the map says); its bytes, zeros included,
// complete `bar`'s tx-count when they land. `emu` is the host emulator's; unused here.
__device__ __forceinline__ void tma_load_4d(void *smem_dst, TensorMap const *map, TmaGeometry4 const &, int c0, int c1,
                                            int c2, int c3, uint64_t *bar) {
  uint32_t const d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  uint32_t const b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(d),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(b)
      : "memory");
}

// Orders this thread's generic-proxy accesses (plain loads and stores, shared and global) before its
// later async-proxy ones (TMA copies): e.g. shared memory written by threads, then a TMA into it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async;" ::: "memory"); }
#endif

}  // namespace mpk
