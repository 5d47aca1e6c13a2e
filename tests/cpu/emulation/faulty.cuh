// Faulty kernels: each has one bug the emulator must report. `// @name` marks the source lines a
// report must name (test_detection.py finds them by their marker, so these lines may move).
#pragma once
#include <stdint.h>

#include "primitives/block.cuh"
#include "primitives/cp_async.cuh"
#include "primitives/mma.cuh"
#include "primitives/prefetch.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace test {

// Reads a neighbour's shared word with no barrier after the neighbour's write.
__device__ void racy_shared(TaskDesc const &task, Runtime const &) {
  __shared__ uint32_t s[kWorkerThreads];
  int const t = threadIdx.x;
  s[t] = t;  // @racy-shared-write
  task.output<uint32_t>(0)[t] = s[(t + 1) % kWorkerThreads];  // @racy-shared-read
}

// Thread 1 reads what thread 0 writes to global memory, with no barrier.
__device__ void racy_global(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  if (threadIdx.x == 0) out[0] = 7;  // @racy-global-write
  if (threadIdx.x == 1) out[1] = out[0];  // @racy-global-read
}

// A shuffle synchronizes the lanes but orders no memory: this exchange needs __syncwarp.
__device__ void shuffle_is_no_fence(TaskDesc const &task, Runtime const &) {
  __shared__ uint32_t s[kWorkerThreads];
  int const t = threadIdx.x;
  s[t] = t;  // @no-fence-write
  uint32_t const v = __shfl_xor_sync(0xffffffffu, t, 1);
  task.output<uint32_t>(0)[t] = s[v];  // @no-fence-read
}

// Every thread writes one shared word; which value survives depends on the order threads run in.
__device__ void last_writer(TaskDesc const &task, Runtime const &) {
  __shared__ uint32_t s;
  s = threadIdx.x;  // @last-writer
  __syncthreads();
  if (threadIdx.x == 0) task.output<uint32_t>(0)[0] = s;
}

// Threads 64 and up return before a barrier the others wait at.
__device__ void barrier_after_return(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x >= 64) return;
  __syncthreads();  // @barrier-after-return
  task.output<uint32_t>(0)[threadIdx.x] = 1;
}

// Two halves of the block wait at two different barriers.
__device__ void two_barriers(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x < 64) {
    __syncthreads();  // @two-barriers-a
  } else {
    __syncthreads();  // @two-barriers-b
  }
  task.output<uint32_t>(0)[threadIdx.x] = 1;
}

// Lanes 16-31 return; lanes 0-15 shuffle with a full mask.
__device__ void shuffle_after_return(TaskDesc const &task, Runtime const &) {
  int const lane = threadIdx.x % 32;
  if (lane >= 16) return;
  task.output<uint32_t>(0)[threadIdx.x] = __shfl_xor_sync(0xffffffffu, lane, 1);  // @shuffle-after-return
}

// Lanes 0-15 shuffle with a full mask while lanes 16-31 go on to a barrier.
__device__ void shuffle_in_branch(TaskDesc const &task, Runtime const &) {
  int const lane = threadIdx.x % 32;
  uint32_t v = lane;
  if (lane < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);  // @shuffle-in-branch
  __syncthreads();  // @shuffle-in-branch-barrier
  task.output<uint32_t>(0)[threadIdx.x] = v;
}

// Every lane calls with a mask of lanes 0-15 only.
__device__ void mask_without_caller(TaskDesc const &task, Runtime const &) {
  task.output<uint32_t>(0)[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, threadIdx.x, 1);  // @mask-without-caller
}

// Lanes 0-15 read lanes 16-31, which are not in their mask.
__device__ void source_outside_mask(TaskDesc const &task, Runtime const &) {
  int const lane = threadIdx.x % 32;
  if (lane < 16)
    task.output<uint32_t>(0)[threadIdx.x] = __shfl_sync(0x0000ffffu, lane, lane + 16);  // @source-outside-mask
}

// Thread 0 spins on a flag that thread 1 sets only after a barrier thread 0 never reaches.
__device__ void spin_forever(TaskDesc const &, Runtime const &) {
  int volatile *flag = reinterpret_cast<int volatile *>(dynamic_smem);  // poisoned: -1
  if (threadIdx.x == 0)
    while (*flag != 1) __nanosleep(100);  // @spin-forever
  __syncthreads();
  if (threadIdx.x == 1) *flag = 1;
}

// Thread 0 spins on a plain load of a word nobody writes: it never yields to the scheduler.
__device__ void spins_without_yielding(TaskDesc const &task, Runtime const &) {
  uint32_t volatile *word = task.output<uint32_t>(0);  // zero
  if (threadIdx.x == 0)
    while (word[0] == 0) {  // @spins-without-yielding
    }
}

// Every thread loops through barriers forever: each round moves, and the block never ends.
__device__ void barriers_forever(TaskDesc const &, Runtime const &) {
  for (;;) __syncthreads();  // @barriers-forever
}

// Reads dynamic shared memory before anyone wrote it (on the device: what an earlier task left).
__device__ void reads_unwritten(TaskDesc const &task, Runtime const &) {
  task.output<uint32_t>(0)[threadIdx.x] =
      reinterpret_cast<uint32_t const *>(dynamic_smem)[threadIdx.x];  // @reads-unwritten
}

// Writes dynamic shared memory past the 64 bytes its test gives it.
__device__ void smem_overflow(TaskDesc const &, Runtime const &) {
  if (threadIdx.x < 32) reinterpret_cast<uint32_t *>(dynamic_smem)[threadIdx.x] = threadIdx.x;  // @smem-overflow
}

// One word far past the task's bytes, where the canary check compares whole chunks first.
__device__ void smem_overflow_far(TaskDesc const &, Runtime const &) {
  if (threadIdx.x == 0) reinterpret_cast<uint32_t *>(dynamic_smem)[750] = 1u;  // bytes 3000..3003
}

// tasks/common/block_reduce.cuh without its second barrier, called twice: a warp that is ahead
// writes the second call's partial sum while others still read the first call's.
template <typename T>
__device__ __forceinline__ T one_barrier_reduce(T v) {
  __shared__ T partial[kWorkerWarps];
  v = warp_reduce(v, SumOp());
  if (threadIdx.x % kWarpSize == 0) partial[threadIdx.x / kWarpSize] = v;  // @one-barrier-write
  __syncthreads();
  T r = 0;
  for (int w = 0; w < kWorkerWarps; ++w) r += partial[w];  // @one-barrier-read
  return r;
}

__device__ void racy_block_reduce(TaskDesc const &task, Runtime const &) {
  uint32_t const a = one_barrier_reduce<uint32_t>(threadIdx.x);  // @one-barrier-first-call
  uint32_t const b = one_barrier_reduce<uint32_t>(1);  // @one-barrier-second-call
  task.output<uint32_t>(0)[threadIdx.x] = a + b;
}

// A 16-byte load 4 bytes into dynamic shared memory: fine on x86, a misaligned address on the device.
__device__ void misaligned_vector(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < 8; ++i) reinterpret_cast<uint32_t *>(dynamic_smem)[i] = i;
    uint4 const v = *reinterpret_cast<uint4 const *>(dynamic_smem + 4 * (threadIdx.x + 1));  // @misaligned-vector
    task.output<uint32_t>(0)[0] = v.x;
  }
}

__device__ void traps(TaskDesc const &, Runtime const &) {
  if (threadIdx.x == 9) __trap();  // @traps
}

// Reads the destination of its own cp.async before waiting for it: on the device, whatever was there.
__device__ void cp_async_early_read(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  uint32_t *s = reinterpret_cast<uint32_t *>(dynamic_smem);
  int const t = threadIdx.x;
  cp_async_16(s + 4 * t, out + 4 * kWorkerThreads + 4 * t);  // @cp-async-issue
  cp_async_commit();
  out[t] = s[4 * t];  // @cp-async-early-read
  cp_async_wait_all();
}

// Lanes 16-31 of warp 0 leave before the warp's mma.
__device__ void mma_half_warp(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x >= 16 && threadIdx.x < 32) return;
  float c[4] = {};
  if (threadIdx.x < 32) mma_m16n8k16<__nv_bfloat16>(c, 0, 0, 0, 0, 0, 0);  // @mma-half-warp
  task.output<float>(0)[threadIdx.x] = c[0];
}

// Each half of the block passes its own named barrier, then reads a word the other half wrote: no
// barrier orders the two halves.
__device__ void named_barrier_other_half(TaskDesc const &task, Runtime const &) {
  __shared__ uint32_t s[kWorkerThreads];
  int const t = threadIdx.x, half = kWorkerThreads / 2;
  s[t] = t;  // @other-half-write
  named_barrier_sync(1 + t / half, half);
  task.output<uint32_t>(0)[t] = s[(t + half) % kWorkerThreads];  // @other-half-read
}

// Threads 0-63 wait at a named barrier for all 128 threads, but threads 64-127 return.
__device__ void named_barrier_short(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x >= 64) return;
  named_barrier_sync(1, kWorkerThreads);  // @named-short
  task.output<uint32_t>(0)[threadIdx.x] = 1;
}

// Every thread waits at a named barrier for 64.
__device__ void named_barrier_too_many(TaskDesc const &task, Runtime const &) {
  named_barrier_sync(2, 64);  // @named-too-many
  task.output<uint32_t>(0)[threadIdx.x] = 1;
}

// Warps 0-1 give named barrier 1 a count of 64, warps 2-3 a count of 128.
__device__ void named_barrier_counts_differ(TaskDesc const &task, Runtime const &) {
  named_barrier_sync(1, threadIdx.x < 64 ? 64 : 128);
  task.output<uint32_t>(0)[threadIdx.x] = 1;
}

// Lanes 0-15 of warps 0 and 1 make a named barrier's 32 threads.
__device__ void named_barrier_half_warps(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x < 64 && threadIdx.x % 32 < 16) named_barrier_sync(1, 32);  // @named-half-warps
  task.output<uint32_t>(0)[threadIdx.x] = 1;
}

// Named barrier 0 is __syncthreads'; 48 threads are not whole warps.
__device__ void named_barrier_invalid(TaskDesc const &task, Runtime const &) {
  bool const id_zero = task.output<uint32_t>(0)[0] == 0;
  named_barrier_sync(id_zero ? 0 : 1, id_zero ? 64 : 48);  // @named-invalid
}

// Thread 0 reads a word one past the end of its output (the caller gives it 128 words).
__device__ void read_past_end(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  if (threadIdx.x == 0) out[0] = out[kWorkerThreads];  // @read-past-end
}

// Thread 0 asks L2 for the line just past the end of its output (the caller gives it 128 words): a
// hint only on the device, but one past its tensor is a bug the emulator reports (prefetch.cuh).
__device__ void prefetch_past_end(TaskDesc const &task, Runtime const &) {
  uint32_t const *out = task.output<uint32_t>(0);
  if (threadIdx.x == 0) prefetch_l2(out + kWorkerThreads);  // @prefetch-past-end
}

// Thread 0 writes one word past its output slice (the caller allows the first 128 words).
__device__ void write_past_slice(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  out[threadIdx.x] = threadIdx.x;
  if (threadIdx.x == 0) out[kWorkerThreads] = 1;  // @write-past-slice
}

// Thread 3 reads through a pointer that points nowhere.
__device__ void wild_read(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  if (threadIdx.x == 3)
    out[1] = *reinterpret_cast<uint32_t const *>(static_cast<uintptr_t>(out[0]) << 12);  // @wild-read
}

// Thread 2 divides by a zero it read (x86 traps, the device gives an undefined value).
__device__ void divides_by_zero(TaskDesc const &task, Runtime const &) {
  uint32_t *out = task.output<uint32_t>(0);
  if (threadIdx.x == 2) out[1] = 7u / out[0];  // @divides-by-zero
}

__device__ int deep(int n) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(n);
  return n ? deep(n - 1) + pad[0] : 0;  // @deep
}

// Thread 5 recurses through 1 MB of stack.
__device__ void overflows_its_stack(TaskDesc const &task, Runtime const &) {
  if (threadIdx.x == 5) task.output<uint32_t>(0)[0] = deep(1000);
}

// A local array of 200 KB (legal on the device, past the emulator's 128 KB fiber stack): thread 0
// writes its first element and every thread its own last.
__device__ void big_local_array(TaskDesc const &task, Runtime const &) {
  float volatile big[50000];  // @big-local-array
  big[threadIdx.x == 0 ? 0 : 49999] = static_cast<float>(threadIdx.x);
  task.output<uint32_t>(0)[threadIdx.x] = static_cast<uint32_t>(big[threadIdx.x == 0 ? 0 : 49999]);
}

// Lanes 0-15 sum with a full mask while lanes 16-31 take the maximum: two different collectives.
__device__ void reductions_differ(TaskDesc const &task, Runtime const &) {
  int const lane = threadIdx.x % 32;
  unsigned v;
  if (lane < 16)
    v = __reduce_add_sync(0xffffffffu, lane);  // @reduce-add
  else
    v = __reduce_max_sync(0xffffffffu, lane);  // @reduce-max
  task.output<uint32_t>(0)[threadIdx.x] = v;
}

}  // namespace test
}  // namespace mpk
