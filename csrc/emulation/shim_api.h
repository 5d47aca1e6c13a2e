// What the shim's macros call in the block runner (emulation/block_runner.cpp): barriers, warp
// collectives and the built-in variables. Free of macros, so host-only code can include it.
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

enum BarrierKind : int { kSyncthreads, kSyncthreadsCount, kSyncthreadsAnd, kSyncthreadsOr };
enum WarpKind : int { kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncwarp };

// The runner (block_runner.cpp). Each call is a switch point: the fiber waits there until the
// barrier or collective completes, and gets its result.
int barrier(Site site, int kind, int pred);
uint64_t warp_collective(Site site, int kind, unsigned mask, uint64_t value, int arg, int width);
void yield(Site site);
[[noreturn]] void trap(Site site, char const *what);
unsigned long long clock_ticks();
size_t cvta_generic_to_shared(void const *p);

}  // namespace emu
}  // namespace mpk
