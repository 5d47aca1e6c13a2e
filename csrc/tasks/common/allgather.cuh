// All-gather across the ranks of one host: output[:, q * WIDTH + c] = rank q's input[:, c] (+ q *
// rank_offset for integer elements: a shard's local indices made global), on every rank. One task
// per slice of ROWS rows x COLS columns of the (TOTAL_ROWS, WIDTH) input; it writes that slice of
// every rank's part of the output. The data moves as in allreduce.cuh: a one-shot push of the slice
// into every peer's buffer (2, world_size, TOTAL_ROWS, WIDTH), a signal per peer, a wait for every
// peer's signal, then local reads.
#pragma once
#include <stdint.h>

#include <type_traits>

#include "primitives/loads.cuh"
#include "primitives/vec.cuh"
#include "runtime/comm.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {

template <typename T, int ROWS, int COLS, int TOTAL_ROWS, int WIDTH, bool OFFSET>
__device__ __forceinline__ void allgather(TaskDesc const &task, Runtime const &rt) {
  constexpr int V = kVec16<T>;
  static_assert(COLS % V == 0 && WIDTH % V == 0, "allgather: a slice row must be whole 16-byte vectors");
  static_assert(!OFFSET || std::is_integral_v<T>, "allgather: rank_offset applies to integer elements");
  constexpr int CV = COLS / V;
  constexpr size_t kSlot = static_cast<size_t>(TOTAL_ROWS) * WIDTH;

  T const *x = task.input<T const>(0);
  T *y = task.output<T>(0);       // the whole output, (TOTAL_ROWS, world_size * WIDTH)
  T *buffer = task.output<T>(1);  // the whole buffer
  MpkComm const *c = rt.comm;
  uint32_t const world = c && c->heap ? c->world_size : 1;
  uint32_t const me = world > 1 ? c->rank : 0;
  int const row0 = task.grid_idx[1] * ROWS, col0 = task.grid_idx[0] * COLS;
  int const live = max(0, min(ROWS, rt.active_rows(TOTAL_ROWS) - row0));
  int const n = live * CV;
  unsigned long long const epoch = rt.absolute_iteration + 1;
  T *slot = buffer + (epoch & 1) * world * kSlot + static_cast<size_t>(row0) * WIDTH + col0;

  if (world > 1) {
    for (int i = threadIdx.x; i < n; i += kWorkerThreads) {
      int const row = i / CV, col = (i % CV) * V;
      uint4 const v = ld_16(x + static_cast<size_t>(row) * WIDTH + col);
      T *mine = slot + me * kSlot + static_cast<size_t>(row) * WIDTH + col;
      for (uint32_t q = 0; q < world; ++q)
        if (q != me) st_16(comm::peer_ptr(*c, mine, q), v);
    }
    __syncthreads();
    if (threadIdx.x == 0) comm::signal_peers(*c, task.task_id, epoch);
    bool ok = true;
    if (threadIdx.x < kWarpSize) ok = comm::wait_peers(rt, task.task_id, epoch);
    if (!__syncthreads_and(ok)) return;  // the watchdog stopped the launch
  }

  long long const step = OFFSET ? task.scalar_i(0) : 0;
  for (int i = threadIdx.x; i < n * static_cast<int>(world); i += kWorkerThreads) {
    int const q = i / n, j = i % n;
    int const row = j / CV, col = (j % CV) * V;
    size_t const at = static_cast<size_t>(row) * WIDTH + col;
    union {
      uint4 raw;
      T v[V];
    } u;
    u.raw = q == static_cast<int>(me) ? ld_16(x + at) : ld_cg_16(slot + q * kSlot + at);
    if constexpr (OFFSET) {
#pragma unroll
      for (int k = 0; k < V; ++k) u.v[k] += static_cast<T>(step * q);
    }
    st_16(y + static_cast<size_t>(row0 + row) * (world * WIDTH) + q * WIDTH + col0 + col, u.raw);
  }
}

}  // namespace tasks
}  // namespace mpk
