// One kernel per primitive of csrc/primitives, for comparing its host version with an independent
// PyTorch model of its documented semantics (tests/cpu/emulation/test_primitives.py) and with the
// device (tests/gpu/test_primitives_gpu.py runs the same kernels on both, on the same inputs).
// Inputs and outputs are the task's slices; primitive_cases.py says what each holds.
#pragma once
#include <stdint.h>

#include "primitives/block.cuh"
#include "primitives/cp_async.cuh"
#include "primitives/loads.cuh"
#include "primitives/memory_order.cuh"
#include "primitives/mma.cuh"
#include "primitives/timer.cuh"
#include "primitives/tma.cuh"
#include "primitives/vec.cuh"
#include "primitives/warp.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace prim_test {

// Warp w computes tile w: D = A * B + C with A (16x16) and B (16x8, [k][n]) as the raw 16-bit
// elements of T, C and D (16x8) in fp32; each lane loads its fragments in mma.cuh's layout.
template <typename T>
__device__ void mma_tiles(TaskDesc const &task, Runtime const &) {
  int const w = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  uint16_t const *a = task.input<uint16_t const>(0) + w * 16 * 16;
  uint16_t const *b = task.input<uint16_t const>(1) + w * 16 * 8;
  float const *c = task.input<float const>(2) + w * 16 * 8;
  float *d = task.output<float>(0) + w * 16 * 8;
  auto pair_a = [&](int row, int k) { return uint32_t{a[row * 16 + k]} | uint32_t{a[row * 16 + k + 1]} << 16; };
  auto pair_b = [&](int k, int n) { return uint32_t{b[k * 8 + n]} | uint32_t{b[(k + 1) * 8 + n]} << 16; };
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  mma_m16n8k16<T>(acc, pair_a(g, 2 * t), pair_a(g + 8, 2 * t), pair_a(g, 2 * t + 8), pair_a(g + 8, 2 * t + 8),
                  pair_b(2 * t, g), pair_b(2 * t + 8, g));
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// Thread t copies in[t] (16 bytes) to shared memory with cp.async, waits, and after a barrier
// writes the copy of thread (t + 1) % N: out[t] = in[(t + 1) % N].
__device__ void cp_async_copy(TaskDesc const &task, Runtime const &) {
  uint4 const *in = task.input<uint4 const>(0);
  uint4 *out = task.output<uint4>(0);
  uint4 *s = reinterpret_cast<uint4 *>(dynamic_smem);
  int const t = threadIdx.x;
  cp_async_16(s + t, in + t);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  out[t] = s[(t + 1) % kWorkerThreads];
}

// out[t] = ld_stream_16(in + t); out[N + t] = ld_16(in + t); st_16(out + 2N + t, in[t]).
__device__ void loads(TaskDesc const &task, Runtime const &) {
  uint4 const *in = task.input<uint4 const>(0);
  uint4 *out = task.output<uint4>(0);
  int const t = threadIdx.x;
  out[t] = ld_stream_16(in + t);
  out[kWorkerThreads + t] = ld_16(in + t);
  st_16(out + 2 * kWorkerThreads + t, ld_16(in + t));
}

// out (8 uint64, zeroed): [0] += t + 1 by every thread (red.relaxed), [1] += 1 (red.release); after
// a barrier thread 0: [2] = ld.acquire [0], [3] = ld.relaxed [1], [4] = st.release of a constant,
// [5] = st.relaxed of 3 * [2], the low word of [6] = st.relaxed (32-bit) of a constant and its high
// word what ld.relaxed (32-bit) reads back.
__device__ void memory_order(TaskDesc const &task, Runtime const &) {
  unsigned long long *out = task.output<unsigned long long>(0);
  int const t = threadIdx.x;
  red_add_relaxed_gpu(&out[0], t + 1);
  red_add_release_gpu(&out[1], 1);
  __syncthreads();
  if (t == 0) {
    fence_acq_rel_gpu();
    out[2] = ld_acquire_gpu(&out[0]);
    out[3] = ld_relaxed_gpu(&out[1]);
    st_release_gpu(&out[4], 0x0123456789abcdefull);
    st_relaxed_gpu(&out[5], 3 * out[2]);
    uint32_t *words = reinterpret_cast<uint32_t *>(&out[6]);
    st_relaxed_gpu(&words[0], 0xdeadbeefu);
    words[1] = ld_relaxed_gpu(&words[0]);
  }
}

// out (4 uint64, zeroed): thread 0 reads the global timer ([0]), polls a flag with sleep_ns until
// the last thread sets it, reads the timer again ([1]) and writes 1 to [2]; the flag is [3]. A poll
// that never lets the other threads run would never end.
__device__ void timer(TaskDesc const &task, Runtime const &) {
  unsigned long long *out = task.output<unsigned long long>(0);
  uint32_t *flag = reinterpret_cast<uint32_t *>(&out[3]);
  int const t = threadIdx.x;
  if (t == 0) {
    out[0] = global_timer_ns();
    while (ld_relaxed_gpu(flag) == 0) sleep_ns(100);
    out[1] = global_timer_ns();
    out[2] = 1;
  }
  if (t == kWorkerThreads - 1) st_relaxed_gpu(flag, 1u);
}

// in: N floats. out[t] = warp_sum(in[t]); out[N + t] = warp_reduce(in[t], MaxOp());
// out[2N + t] = block_reduce(in[t], SumOp()); out[3N + t] = block_reduce(in[t], MaxOp()).
__device__ void reductions(TaskDesc const &task, Runtime const &) {
  float const *in = task.input<float const>(0);
  float *out = task.output<float>(0);
  int const t = threadIdx.x;
  float const v = in[t];
  out[t] = warp_sum(v);
  out[kWorkerThreads + t] = warp_reduce(v, MaxOp());
  out[2 * kWorkerThreads + t] = block_reduce(v, SumOp());
  out[3 * kWorkerThreads + t] = block_reduce(v, MaxOp());
}

// CUDA's warp reductions and matches (redux.sync, match.sync: sm80 and up), which task bodies may use
// directly. in: N ints v. out[k * N + t], with u = unsigned(v), lane = t % 32 and full masks unless
// said: 0-2: __reduce_add / min / max_sync(v); 3-5: the same of u; 6-8: __reduce_and / or /
// xor_sync(u); 9: __reduce_add_sync(0x77777777, v) in the mask's lanes (lane % 4 != 3), else 0;
// 10: __match_any_sync(v % 5); 11: __match_any_sync of the 64-bit (v % 3) << 33; 12, 13:
// __match_all_sync(warp number) and its pred; 14, 15: __match_all_sync(lane < 31 ? 7 : 8) and its
// pred; 16: __match_any_sync(0x0000ffff, v & 1) in lanes 0-15, else 0; 17, 18: the low and high
// halves of warp_max (warp.cuh) of the 64-bit key (u % 4) << 32 | (lane * 37 % 101), whose high
// halves tie, so that the low half decides.
__device__ void warp_intrinsics(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads;
  constexpr unsigned kFull = 0xffffffffu;
  int const *in = task.input<int const>(0);
  uint32_t *out = task.output<uint32_t>(0);
  int const t = threadIdx.x, lane = t % kWarpSize;
  int const v = in[t];
  unsigned const u = static_cast<unsigned>(v);
  out[0 * N + t] = static_cast<uint32_t>(__reduce_add_sync(kFull, v));
  out[1 * N + t] = static_cast<uint32_t>(__reduce_min_sync(kFull, v));
  out[2 * N + t] = static_cast<uint32_t>(__reduce_max_sync(kFull, v));
  out[3 * N + t] = __reduce_add_sync(kFull, u);
  out[4 * N + t] = __reduce_min_sync(kFull, u);
  out[5 * N + t] = __reduce_max_sync(kFull, u);
  out[6 * N + t] = __reduce_and_sync(kFull, u);
  out[7 * N + t] = __reduce_or_sync(kFull, u);
  out[8 * N + t] = __reduce_xor_sync(kFull, u);
  out[9 * N + t] = lane % 4 != 3 ? static_cast<uint32_t>(__reduce_add_sync(0x77777777u, v)) : 0u;
  out[10 * N + t] = __match_any_sync(kFull, v % 5);
  out[11 * N + t] = __match_any_sync(kFull, static_cast<unsigned long long>(v % 3 + 3) << 33);
  int pred = -1;
  out[12 * N + t] = __match_all_sync(kFull, t / kWarpSize, &pred);
  out[13 * N + t] = static_cast<uint32_t>(pred);
  out[14 * N + t] = __match_all_sync(kFull, lane < 31 ? 7 : 8, &pred);
  out[15 * N + t] = static_cast<uint32_t>(pred);
  out[16 * N + t] = lane < 16 ? __match_any_sync(0x0000ffffu, v & 1) : 0u;
  unsigned long long const best = warp_max(static_cast<unsigned long long>(u % 4) << 32 | (lane * 37 % 101));
  out[17 * N + t] = static_cast<uint32_t>(best);
  out[18 * N + t] = static_cast<uint32_t>(best >> 32);
}

// named_barrier_sync: warps 0-1 and warps 2-3 are two groups, each passing 3 (resp. 5) rounds through
// shared memory ordered only by its own named barrier (1, resp. 2, of 64 threads). Round r: thread t
// writes in[t] + r, then reads its group neighbour's word: out[r * N + t] (0 past its group's rounds).
__device__ void named_barriers(TaskDesc const &task, Runtime const &) {
  constexpr int N = kWorkerThreads, P = N / 2;
  __shared__ int32_t s[N];
  int32_t const *in = task.input<int32_t const>(0);
  int32_t *out = task.output<int32_t>(0);
  int const t = threadIdx.x, group = t / P, rounds = group == 0 ? 3 : 5;
  for (int r = 0; r < rounds; ++r) {
    s[t] = in[t] + r;
    named_barrier_sync(1 + group, P);
    out[r * N + t] = s[group * P + (t + 1) % P];
    named_barrier_sync(1 + group, P);
  }
  for (int r = rounds; r < 5; ++r) out[r * N + t] = 0;
}

// in: N * kVec16<T> floats. Thread t stores its kVec16<T> of them as T with store16 (out 0) and
// reads them back as floats with load16 (out 1).
template <typename T>
__device__ void vec_round_trip(TaskDesc const &task, Runtime const &) {
  constexpr int V = kVec16<T>;
  float const *in = task.input<float const>(0);
  T *out = task.output<T>(0);
  float *back = task.output<float>(1);
  int const t = threadIdx.x;
  float v[V], w[V];
  for (int k = 0; k < V; ++k) v[k] = in[t * V + k];
  store16(out + t * V, v);
  load16(out + t * V, w);
  for (int k = 0; k < V; ++k) back[t * V + k] = w[k];
}

// TMA, on the host emulator only: the device would need a map the host encoded (primitive_cases.py
// leaves these kernels out of the device build). The tensor: int16, dims (100, 6, 3, 2), rows
// padded to 112 elements (the padding is never read); a box is (64, 4, 2, 2): 16 rows of 128 bytes.
// The copies go to dynamic shared memory; the error cases' mbarrier sits past the box.
constexpr unsigned kTmaBoxBytes = 64 * 4 * 2 * 2 * 2;

__device__ __forceinline__ TmaGeometry4 tma_geometry(TaskDesc const &task, bool swizzle, int box3 = 2) {
  return TmaGeometry4{
      task.input<int16_t const>(0), 2, {100, 6, 3, 2}, {224, 224 * 6, 224 * 6 * 3}, {64, 4, 2, box3}, swizzle};
}

// Thread 0 starts the copy of the box at (48, -1, 2, 0), which reaches outside dims 0, 1 and 2;
// every thread waits for phase 0 and writes 16 bytes of shared memory as they lie there (swizzled
// or not) to out 0. Out 1: the destination's shared address, which the swizzle depends on.
template <bool kSwizzle>
__device__ void tma_tile(TaskDesc const &task, Runtime const &) {
  __shared__ uint64_t bar;
  uint4 *s = reinterpret_cast<uint4 *>(dynamic_smem);
  int const t = threadIdx.x;
  if (t == 0) mbarrier_init(&bar, 1);
  __syncthreads();
  if (t == 0) {
    mbarrier_arrive_expect_tx(&bar, kTmaBoxBytes);
    tma_load_4d(s, nullptr, tma_geometry(task, kSwizzle), 48, -1, 2, 0, &bar);
  }
  mbarrier_wait_parity(&bar, 0);
  task.output<uint4>(0)[t] = s[t];
  if (t == 0) task.output<long long>(1)[0] = static_cast<long long>(__cvta_generic_to_shared(s));
  __syncthreads();  // every wait before the barrier's end
  if (t == 0) mbarrier_inval(&bar);
}

// Two stages through one buffer and one mbarrier (phases 0 and 1). Before the first, thread 0's wait
// for parity 1 returns at once (the phase before phase 0 counts as complete). Stage 0: thread 0 copies
// the box at (0, 0, 0, 0); stage 1: the box at (36, 2, 1, 0) in two halves along dim 3, by threads
// 0 and 32, counted on the barrier by thread 0's one arrival. out[stage * N + t]: 16 bytes each.
__device__ void tma_pipeline(TaskDesc const &task, Runtime const &) {
  __shared__ uint64_t bar;
  uint4 *s = reinterpret_cast<uint4 *>(dynamic_smem);
  uint4 *out = task.output<uint4>(0);
  int const t = threadIdx.x;
  if (t == 0) mbarrier_init(&bar, 1);
  __syncthreads();
  if (t == 0) {
    mbarrier_wait_parity(&bar, 1);  // (not by the other threads: thread 0 may have completed phase 0 by then)
    mbarrier_arrive_expect_tx(&bar, kTmaBoxBytes);
    tma_load_4d(s, nullptr, tma_geometry(task, false), 0, 0, 0, 0, &bar);
  }
  mbarrier_wait_parity(&bar, 0);
  out[t] = s[t];
  __syncthreads();  // every read of stage 0 before stage 1 overwrites the buffer
  if (t == 0) mbarrier_arrive_expect_tx(&bar, kTmaBoxBytes);
  if (t == 0 || t == 32)  // thread 32's half may land before thread 0 announces the bytes: tx-count < 0 a while
    tma_load_4d(dynamic_smem + t / 32 * (kTmaBoxBytes / 2), nullptr, tma_geometry(task, false, 1), 36, 2, 1, t / 32,
                &bar);
  mbarrier_wait_parity(&bar, 1);
  out[kWorkerThreads + t] = s[t];
  __syncthreads();
  if (t == 0) mbarrier_inval(&bar);
}

// The mistakes the emulator reports, one a kernel (thread 0 alone unless said).
__device__ void tma_uninitialized(TaskDesc const &, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x == 0) mbarrier_wait_parity(bar, 0);  // @tma-uninitialized
}

__device__ void tma_to_global(TaskDesc const &task, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x != 0) return;
  mbarrier_init(bar, 1);
  mbarrier_arrive_expect_tx(bar, kTmaBoxBytes);
  tma_load_4d(task.output<void>(0), nullptr, tma_geometry(task, false), 0, 0, 0, 0, bar);  // @tma-to-global
}

__device__ void tma_misaligned(TaskDesc const &task, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x != 0) return;
  mbarrier_init(bar, 1);
  mbarrier_arrive_expect_tx(bar, kTmaBoxBytes);
  tma_load_4d(dynamic_smem + 16, nullptr, tma_geometry(task, false), 0, 0, 0, 0, bar);  // @tma-misaligned
}

// Every thread waits for a phase that expects twice the bytes the one copy brings.
__device__ void tma_never_completes(TaskDesc const &task, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    mbarrier_arrive_expect_tx(bar, 2 * kTmaBoxBytes);
    tma_load_4d(dynamic_smem, nullptr, tma_geometry(task, false), 0, 0, 0, 0, bar);
  }
  __syncthreads();
  mbarrier_wait_parity(bar, 0);  // @tma-never-completes
}

// The copy brings twice the bytes announced.
__device__ void tma_too_many_bytes(TaskDesc const &task, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x != 0) return;
  mbarrier_init(bar, 1);
  mbarrier_arrive_expect_tx(bar, kTmaBoxBytes / 2);
  tma_load_4d(dynamic_smem, nullptr, tma_geometry(task, false), 0, 0, 0, 0, bar);
  mbarrier_wait_parity(bar, 0);  // @tma-too-many-bytes
}

// Threads 0 (the issuer) and 1 read the destination before their waits: on the device, whatever
// is there by then. A race-checking run reports both: thread 0 reads while the copy is in flight,
// thread 1 (in order) after thread 0's wait landed it.
__device__ void tma_early_read(TaskDesc const &task, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  int const *s = reinterpret_cast<int const *>(dynamic_smem);
  int *out = task.output<int>(0);
  int const t = threadIdx.x;
  if (t == 0) mbarrier_init(bar, 1);
  __syncthreads();
  if (t == 0) {
    mbarrier_arrive_expect_tx(bar, kTmaBoxBytes);
    tma_load_4d(dynamic_smem, nullptr, tma_geometry(task, false), 0, 0, 0, 0, bar);  // @tma-early-read-issue
    out[0] = s[0];  // @tma-read-in-flight
  }
  __syncthreads();
  if (t == 1) out[1] = s[1];  // @tma-early-read
  mbarrier_wait_parity(bar, 0);
  __syncthreads();
  if (t == 0) mbarrier_inval(bar);
}

// A barrier initialized again while it is still valid (no mbarrier_inval between).
__device__ void tma_init_twice(TaskDesc const &, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x != 0) return;
  mbarrier_init(bar, 1);  // @tma-first-init
  mbarrier_init(bar, 1);  // @tma-init-again
}

// The task ends with its barrier valid: its memory is the next task's shared memory.
__device__ void tma_left_valid(TaskDesc const &, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x == 0) mbarrier_init(bar, 1);  // @tma-left-valid
}

// The task ends with its copy never waited for.
__device__ void tma_never_waited(TaskDesc const &task, Runtime const &) {
  uint64_t *bar = reinterpret_cast<uint64_t *>(dynamic_smem + kTmaBoxBytes);
  if (threadIdx.x != 0) return;
  mbarrier_init(bar, 1);
  mbarrier_arrive_expect_tx(bar, kTmaBoxBytes);
  tma_load_4d(dynamic_smem, nullptr, tma_geometry(task, false), 0, 0, 0, 0, bar);  // @tma-never-waited
}

}  // namespace prim_test
}  // namespace mpk
