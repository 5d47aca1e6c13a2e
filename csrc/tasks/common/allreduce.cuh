// All-reduce across the ranks of one host: y = sum over ranks of x (+ r), in fp32 summed in rank
// order (so every rank computes the same bits), rounded once. One task per slice of ROWS rows x COLS
// columns of the (TOTAL_ROWS, HIDDEN) input.
//
// One-shot push: the task stores its input slice into its slot of every peer's buffer (peer memory,
// over NVLink), signals each peer, waits for every peer's signal, then reads the peers' slots from its
// own buffer and its own slice from its input. Only stores cross the link (a remote load would wait
// a round trip), and the data crosses once, so for the decode batches this serves (up to a few MiB)
// the cost is about one link latency plus the local reads. The buffer is (2, world_size, TOTAL_ROWS,
// HIDDEN): slot [epoch % 2][sender]. Two generations suffice: a rank can run at most one epoch ahead of
// a peer's reads, since its next task waits for that peer's next signal, which comes after those reads.
#pragma once
#include <stdint.h>

#include "primitives/loads.cuh"
#include "primitives/vec.cuh"
#include "runtime/comm.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {

template <typename T, int ROWS, int COLS, int TOTAL_ROWS, int HIDDEN, bool RESIDUAL>
__device__ __forceinline__ void allreduce(TaskDesc const &task, Runtime const &rt) {
  constexpr int V = kVec16<T>;
  static_assert(COLS % V == 0 && HIDDEN % V == 0, "allreduce: a slice row must be whole 16-byte vectors");
  static_assert(ROWS >= 1 && TOTAL_ROWS % ROWS == 0 && HIDDEN % COLS == 0, "allreduce: slices must tile the input");
  constexpr int CV = COLS / V;  // vectors per slice row
  constexpr size_t kSlot = static_cast<size_t>(TOTAL_ROWS) * HIDDEN;  // elements of one [epoch % 2][sender] slot

  T const *x = task.input<T const>(0);
  T const *r = RESIDUAL ? task.input<T const>(1) : nullptr;
  T *y = task.output<T>(0);
  T *buffer = task.output<T>(1);  // the whole buffer: peers store into it, this task reads it
  MpkComm const *c = rt.comm;
  uint32_t const world = c && c->heap ? c->world_size : 1;
  uint32_t const me = world > 1 ? c->rank : 0;
  int const row0 = task.grid_idx[1] * ROWS;
  int const live = max(0, min(ROWS, rt.active_rows(TOTAL_ROWS) - row0));
  int const n = live * CV;
  unsigned long long const epoch = rt.absolute_iteration + 1;
  // This slice's place in slot [epoch % 2][sender 0]; sender q's is kSlot * q further.
  T *slot = buffer + (epoch & 1) * world * kSlot + static_cast<size_t>(row0) * HIDDEN + task.grid_idx[0] * COLS;

  if (world > 1) {
    for (int i = threadIdx.x; i < n; i += kWorkerThreads) {
      int const row = i / CV, col = (i % CV) * V;
      uint4 const v = ld_16(x + static_cast<size_t>(row) * HIDDEN + col);
      T *mine = slot + me * kSlot + static_cast<size_t>(row) * HIDDEN + col;
      for (uint32_t q = 0; q < world; ++q)
        if (q != me) st_16(comm::peer_ptr(*c, mine, q), v);
    }
    __syncthreads();
    if (threadIdx.x == 0) comm::signal_peers(*c, task.task_id, epoch);
    bool ok = true;
    if (threadIdx.x < kWarpSize) ok = comm::wait_peers(rt, task.task_id, epoch);
    if (!__syncthreads_and(ok)) return;  // the watchdog stopped the launch
  }

  for (int i = threadIdx.x; i < n; i += kWorkerThreads) {
    int const row = i / CV, col = (i % CV) * V;
    size_t const at = static_cast<size_t>(row) * HIDDEN + col;
    float acc[V] = {};
    for (uint32_t q = 0; q < world; ++q) {
      union {
        uint4 raw;
        T v[V];
      } u;
      u.raw = q == me ? ld_16(x + at) : ld_cg_16(slot + q * kSlot + at);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += to_float(u.v[k]);
    }
    if constexpr (RESIDUAL) {
      float res[V];
      load16(r + at, res);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += res[k];
    }
    store16(y + at, acc);
  }
}

}  // namespace tasks
}  // namespace mpk
