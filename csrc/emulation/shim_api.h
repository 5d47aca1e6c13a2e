// What the shim's macros and the primitives' host versions call in the block runner
// (emulation/block_runner.cpp): barriers, warp collectives, asynchronous copies, timers and the
// built-in variables. Free of macros, so host-only code can include it.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <vector_types.h>

namespace mpk {
namespace emu {

struct Site {
  char const *file;
  int line;
};

// What task code sees of its thread: CUDA's built-in variables.
struct ThreadView {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
extern thread_local ThreadView const *tls_view;  // the running fiber's; set by the runner

enum BarrierKind : int { kSyncthreads, kSyncthreadsCount, kSyncthreadsAnd, kSyncthreadsOr, kNamedBarrier };
enum WarpKind : int { kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncwarp, kExchange };

// Computes every lane's output of a warp_exchange from all lanes' inputs, indexed by lane.
using Combine = void (*)(void const *const *ins, void *const *outs);

// The runner (block_runner.cpp). Each call is a switch point: the fiber waits there until the
// barrier or collective completes, and gets its result.
int barrier(Site site, int kind, int pred);
// bar.sync id, threads: the calling thread waits until `threads` threads (whole warps) wait at
// barrier `id` (1 to 15; 0 is __syncthreads'), then all of them go on, their memory accesses before
// it ordered before theirs after it.
void named_barrier(Site site, int id, int threads);
uint64_t warp_collective(Site site, int kind, unsigned mask, uint64_t value, int arg, int width);
// A warp collective with a payload (a tensor-core mma): every lane of `mask` waits with its `in`,
// and once all have arrived `combine` fills every lane's `out`. `name` names it in reports. Like
// shuffles it synchronizes the lanes but orders no memory.
void warp_exchange(Site site, char const *name, unsigned mask, void const *in, void *out, Combine combine);
void yield(Site site);
// An atomic write or read-modify-write of `bytes` at `p` (the shim's atomics, the primitives' host
// stores and reductions): the words a task updated atomically, which other tasks of its layer may
// update too (a layer's scratch is checked for plain writes two tasks share: run/layer_scratch.py).
void note_atomic(void const *p, unsigned bytes);
[[noreturn]] void trap(Site site, char const *what);
unsigned long long clock_ticks();
unsigned long long global_timer_ns();
size_t cvta_generic_to_shared(void const *p);

// cp.async: a copy is queued at issue (the destination must be shared memory) and performed by the
// issuing thread's cp_async_wait_all(), or by the cp_async_wait_group(n) that leaves fewer than its
// group among the newest n committed; until then the destination holds what it held. A
// race-checking run reports any access to the destination before that wait (even by the issuer).
// A null source fills the destination with zeros (cp.async with src-size 0).
void cp_async_issue(void *smem_dst, void const *src, unsigned bytes);
void cp_async_commit();
void cp_async_wait_all();
void cp_async_wait_group(int n);

// mbarriers and TMA tensor copies (primitives/tma.cuh). The runner keeps each mbarrier's state by
// its shared address, from the task's mbarrier_init: arrivals per phase, arrivals still to come,
// tx-count (bytes announced by arrive_expect_tx less bytes landed), phases completed, and the TMA
// copies queued on it. A copy lands (global -> shared, tx-count -= its bytes) at a wait on its
// barrier; a phase completes once its arrivals are in and its tx-count is 0. `site` is the caller's
// line (the host versions pass __builtin_FILE / __builtin_LINE as a default argument).
struct TmaBox {
  void const *base;
  int rank;  // 1 to 5; dim 0 contiguous
  int elem_bytes;
  int dims[5];
  long long strides[4];  // bytes, of dims 1 .. rank - 1
  int box[5];            // elements per dim
  int coords[5];         // the box's first element; outside [0, dims) lands as zeros
  bool swizzle128;       // CU_TENSOR_MAP_SWIZZLE_128B
};
void mbarrier_init(Site site, uint64_t *bar, unsigned arrivals);
void mbarrier_inval(Site site, uint64_t *bar);
void mbarrier_arrive_expect_tx(Site site, uint64_t *bar, unsigned bytes);
void mbarrier_wait_parity(Site site, uint64_t *bar, unsigned parity);
// `map`: the tensor map the device would read. One that graph/tensor_maps.py made for CPU tensors
// (EmuTensorMap) is compared with `copy`'s geometry; one of zeros is reported; null, or one the
// driver encoded (a GPU graph's), is not checked.
void tma_load(Site site, void *smem_dst, TmaBox const &copy, void const *map, uint64_t *bar);

// What graph/tensor_maps.py writes into a CPU tensor's map (128 bytes): the geometry it would have
// encoded, without the address (the emulator's tensors are copies elsewhere).
struct EmuTensorMap {
  char magic[8];  // kEmuTensorMapMagic
  int32_t rank, elem_bytes, swizzle_bytes, pad;
  int64_t dims[5];     // from the innermost
  int64_t strides[4];  // bytes, of dims 1 .. rank - 1
  int32_t box[5];
};
constexpr char kEmuTensorMapMagic[8] = {'M', 'P', 'K', 'E', 'M', 'A', 'P', '1'};

}  // namespace emu
}  // namespace mpk
