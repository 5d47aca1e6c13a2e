// Expert linears of a mixture-of-experts block (moe_w13_linear, moe_w2_linear). For every active
// token t routed to expert e (routing[e][t] = slot + 1, see moe_routing.cuh), one output row
//   y[t * TOPK + slot] = x_row @ W[e].T        x_row = x[t] (W13) or x[t * TOPK + slot] (w2)
// with W (E, N, K). W13: N = 2 * inter, gate rows then up rows; the output row is [gate | up]
// (OUT_COLS = N), or SiLU(gate) * up computed in registers (OUT_COLS = N / 2). Rows of inactive
// tokens are never written; fp32 accumulation, one rounding to T.
//
// Work split. Which experts have tokens is known only here, so the layer's T tasks (grid x, scalar
// 0) share the routed work evenly at run time instead of owning experts: a unit is 16 rows of one
// expert's weight (W13: 8 gate rows and the 8 matching up rows, so that SiLU(gate) * up needs no
// other unit; w2: 16 consecutive rows); with n experts holding tokens there are n * N / 16 units, and
// task j takes units [j * n * N/16 / T, (j + 1) * n * N/16 / T). Every task streams the same share
// of the routed weights whichever experts are routed (at 1 token and 8 experts, each expert is
// streamed by T / 8 SMs), experts without tokens cost nothing, and no task idles on a dead expert.
//
// Inside a task, warp w takes every kWorkerWarps-th unit and streams its 16 rows over the whole of K
// with mma m16n8k16: W is the B operand, 16 bytes a lane loaded straight into registers (8
// consecutive k of one row, the k permutation of linear.cuh), U k-blocks of 32 in registers and the
// next U (or the next unit's first) already asked of L2 with a prefetch, which doubles the bytes in
// flight without registers; the expert's tokens are the A operand, up to 64 at a time. Warps never
// wait for each other and need no shared-memory reduction. The token list of each expert (at most
// kMaxSegments at once) is compacted in shared memory from its routing row, while the first rows
// of each warp's first unit are already on their way to L2.
#pragma once
#include <stdint.h>

#include <type_traits>

#include "primitives/loads.cuh"
#include "primitives/mma.cuh"
#include "primitives/prefetch.cuh"
#include "primitives/scan.cuh"
#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"
#include "tasks/common/silu_mul.cuh"

namespace mpk {
namespace tasks {
namespace moe_detail {

constexpr int kUnitRows = 16;     // weight rows of a unit: two n8 tiles of mma
constexpr int kMaxSegments = 2;   // experts whose token lists a task holds at once
constexpr int kMaxTile = 64;      // tokens per pass over a unit's rows (4 m16 tiles)

__host__ __device__ constexpr int largest_divisor_up_to(int n, int limit) {
  for (int d = limit; d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// Weight rows of unit u: two n8 tiles (W13: 8 gate rows and the matching 8 up rows).
template <int N, bool W13>
__device__ __forceinline__ int tile_row(int unit, int tile) {
  return W13 ? tile * (N / 2) + 8 * unit : kUnitRows * unit + 8 * tile;
}

// k-blocks of 32 a warp keeps in flight for MT m16 tiles of tokens: registers bound it.
template <int K, int MT>
__host__ __device__ constexpr int kblocks_in_flight() {
  return largest_divisor_up_to(K / 32, MT == 1 ? 8 : (MT == 2 ? 4 : 2));
}

// Lane (g, t) asks L2 for columns [k, k + SPAN) of row g of both tiles of a unit (r0, r1: those
// rows): the warp covers the 16 rows, so the loads of those columns later find them in L2. It keeps
// one more step of the stream in flight without holding registers.
template <typename T, int SPAN>
__device__ __forceinline__ void prefetch_rows(T const *r0, T const *r1, int k) {
  constexpr int kLine = 128 / sizeof(T);
  int const t = threadIdx.x % 4;
#pragma unroll
  for (int l = t; l * kLine < SPAN; l += 4) {
    prefetch_l2(r0 + k + l * kLine);
    prefetch_l2(r1 + k + l * kLine);
  }
}

// One unit of one expert for n <= 16 * MT tokens: list[i] is the output row (token * TOPK + slot)
// of token i; rows 16 * MT past n are zero. `next` (or -1): the unit this warp runs next, of the
// expert whose weights start at next_w, whose first columns are prefetched during the last step of
// this one. The results go to epi(i, c, a, b): a = row tile_row(unit, 0) + 2t + c of list entry i,
// b = row tile_row(unit, 1) + 2t + c (lane t = lane % 4), for every i < n.
template <typename T, int MT, int K, int N, bool W13, int TOPK, typename Epilogue>
__device__ __forceinline__ void expert_unit(T const *x, T const *w, int const *list, int n, int unit, T const *next_w,
                                            int next, Epilogue epi) {
  constexpr int NKB = K / 32;
  constexpr int U = kblocks_in_flight<K, MT>();
  int const lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;

  T const *xlo[MT];
  T const *xhi[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    int const lo = m * 16 + g, hi = lo + 8;
    xlo[m] = lo < n ? x + static_cast<size_t>(W13 ? list[lo] / TOPK : list[lo]) * K + 8 * t : nullptr;
    xhi[m] = hi < n ? x + static_cast<size_t>(W13 ? list[hi] / TOPK : list[hi]) * K + 8 * t : nullptr;
  }
  int const row0 = tile_row<N, W13>(unit, 0), row1 = tile_row<N, W13>(unit, 1);
  T const *r0 = w + static_cast<size_t>(row0 + g) * K;
  T const *r1 = w + static_cast<size_t>(row1 + g) * K;

  float acc[2][MT][4] = {};
#pragma unroll 1
  for (int kb = 0; kb < NKB; kb += U) {
    if (kb + U < NKB)
      prefetch_rows<T, U * 32>(r0, r1, (kb + U) * 32);
    else if (next >= 0)
      prefetch_rows<T, U * 32>(next_w + static_cast<size_t>(tile_row<N, W13>(next, 0) + g) * K,
                               next_w + static_cast<size_t>(tile_row<N, W13>(next, 1) + g) * K, 0);
    uint4 wv[U][2], xl[U][MT], xh[U][MT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int const k = (kb + u) * 32 + 8 * t;
      wv[u][0] = ld_stream_16(r0 + k);
      wv[u][1] = ld_stream_16(r1 + k);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        xl[u][m] = xlo[m] ? ld_16(xlo[m] + (kb + u) * 32) : uint4{};
        xh[u][m] = xhi[m] ? ld_16(xhi[m] + (kb + u) * 32) : uint4{};
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          // k permutation: mma k 2t+j <- k 8t+j, mma k 2t+8+j <- k 8t+2+j (first step), +4 (second)
          mma_m16n8k16<T>(acc[r][m], xl[u][m].x, xh[u][m].x, xl[u][m].y, xh[u][m].y, wv[u][r].x, wv[u][r].y);
          mma_m16n8k16<T>(acc[r][m], xl[u][m].z, xh[u][m].z, xl[u][m].w, xh[u][m].w, wv[u][r].z, wv[u][r].w);
        }
  }
  // acc[r][m]: c0, c1 = (token m*16+g, tile r's rows 2t, 2t+1); c2, c3 = (token m*16+g+8, same rows)
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int const i = m * 16 + g + 8 * h;
      if (i >= n) continue;
#pragma unroll
      for (int c = 0; c < 2; ++c) epi(i, c, acc[0][m][2 * h + c], acc[1][m][2 * h + c]);
    }
}

// One unit for n <= kMaxTile tokens, with the fewest m16 tiles that hold them.
template <typename T, int K, int N, bool W13, int TOPK, typename Epilogue>
__device__ __forceinline__ void expert_unit_any(T const *x, T const *w, int const *list, int n, int unit,
                                                T const *next_w, int next, Epilogue epi) {
  if (n <= 16)
    expert_unit<T, 1, K, N, W13, TOPK>(x, w, list, n, unit, next_w, next, epi);
  else if (n <= 32)
    expert_unit<T, 2, K, N, W13, TOPK>(x, w, list, n, unit, next_w, next, epi);
  else
    expert_unit<T, 4, K, N, W13, TOPK>(x, w, list, n, unit, next_w, next, epi);
}

// Every unit of one expert this warp takes (first, first + kWorkerWarps, ... < end), for every
// batch of at most kMaxTile of its len tokens: output row list[i] of y gets the unit's columns.
template <typename T, int K, int N, int OUT_COLS, bool W13, int TOPK>
__device__ __forceinline__ void expert_units(T const *x, T const *w, T *y, int const *list, int len, int first,
                                             int end) {
  constexpr bool kFuse = W13 && OUT_COLS * 2 == N;
  int const t = threadIdx.x % 4;
  for (int unit = first; unit < end; unit += kWorkerWarps)
    for (int b = 0; b < len; b += kMaxTile) {
      int const next = b + kMaxTile < len ? -1 : (unit + kWorkerWarps < end ? unit + kWorkerWarps : -1);
      int const row0 = tile_row<N, W13>(unit, 0), row1 = tile_row<N, W13>(unit, 1);
      expert_unit_any<T, K, N, W13, TOPK>(x, w, list + b, min(kMaxTile, len - b), unit, w, next,
                                          [&](int i, int c, float a, float v) {
                                            T *yr = y + static_cast<size_t>(list[b + i]) * OUT_COLS;
                                            if constexpr (kFuse) {
                                              yr[8 * unit + 2 * t + c] = from_float<T>(silu(a) * v);
                                            } else {
                                              yr[row0 + 2 * t + c] = from_float<T>(a);
                                              yr[row1 + 2 * t + c] = from_float<T>(v);
                                            }
                                          });
    }
}

// The experts with tokens (mask rises), in order, into active[] (E ints of shared memory); returns
// their number. Every thread calls it, and every thread sees the whole list when it returns.
template <int E>
__device__ __forceinline__ int routed_experts(int32_t const *mask, int *active) {
  int num_active = 0;
  for (int base = 0; base < E; base += kWorkerThreads) {
    int const e = base + static_cast<int>(threadIdx.x);
    int const has = e < E && mask[e + 1] > mask[e];
    int total;
    int const rank = block_exclusive_sum(has, total);
    if (has) active[num_active + rank] = e;
    num_active += total;
  }
  __syncthreads();  // active[] complete
  return num_active;
}

// The layer's work, shared by moe_linear and moe_topk_w13_linear: task `me` of `num_tasks` takes its
// share of the units of the experts with tokens (mask rises), and for each its token list from the
// expert's routing row (routing + e * row_stride; global memory or shared). smem: E + kMaxSegments * B
// ints of dynamic shared memory. It marks phases `phase` (the experts with tokens listed) and
// `phase` + 1 (each round's token lists built) for the profiler; the units follow.
template <typename T, int B, int E, int TOPK, int K, int N, int OUT_COLS, bool W13>
__device__ __forceinline__ void expert_work(TaskDesc const &task, Runtime const &rt, T const *x, T const *w,
                                            int32_t const *routing, int row_stride, int32_t const *mask, T *y,
                                            int *smem, uint32_t phase) {
  constexpr int UPE = N / kUnitRows;  // units per expert
  int const num_tasks = task.scalar_i(0);
  int const me = task.grid_idx[0];
  int const tokens = rt.active_rows(B);
  int const warp = threadIdx.x / kWarpSize;
  int *active = smem;          // [E] experts with tokens, in order
  int *lists = active + E;     // [kMaxSegments][B] output rows per expert

  int const num_active = routed_experts<E>(mask, active);
  rt.mark(phase);
  long long const units = static_cast<long long>(num_active) * UPE;
  int const lo = static_cast<int>(units * me / num_tasks);
  int const hi = static_cast<int>(units * (me + 1) / num_tasks);

  for (int u = lo; u < hi;) {
    int expert[kMaxSegments], begin[kMaxSegments], end[kMaxSegments], len[kMaxSegments];
    int segments = 0;
#pragma unroll
    for (int s = 0; s < kMaxSegments; ++s) {
      if (u >= hi) break;
      int const a = u / UPE;
      expert[s] = active[a];
      begin[s] = u - a * UPE;
      end[s] = min(hi, (a + 1) * UPE) - a * UPE;
      // the warp that takes the segment's first unit: units go to warps in turn across segments
      begin[s] += ((warp - (u - lo)) % kWorkerWarps + kWorkerWarps) % kWorkerWarps;
      u = min(hi, (a + 1) * UPE);
      segments = s + 1;
    }
    if (begin[0] < end[0]) {  // this warp's first unit: in L2 by the time its token list is built
      int const g = threadIdx.x % kWarpSize / 4;
      T const *we = w + static_cast<size_t>(expert[0]) * N * K;
      prefetch_rows<T, kblocks_in_flight<K, 1>() * 32>(we + static_cast<size_t>(tile_row<N, W13>(begin[0], 0) + g) * K,
                                                       we + static_cast<size_t>(tile_row<N, W13>(begin[0], 1) + g) * K,
                                                       0);
    }
#pragma unroll
    for (int s = 0; s < kMaxSegments; ++s) {
      if (s >= segments) break;
      int32_t const *row = routing + static_cast<size_t>(expert[s]) * row_stride;
      int count = 0;
      for (int base = 0; base < tokens; base += kWorkerThreads) {
        int const t = base + static_cast<int>(threadIdx.x);
        int const slot = t < tokens ? row[t] : 0;
        if (slot < 0 || slot > TOPK) rt.fail(task, MPK_TASK_ERROR_INDEX, slot);
        int const routed = slot > 0 && slot <= TOPK;
        int total;
        int const rank = block_exclusive_sum(routed, total);
        if (routed) lists[s * B + count + rank] = t * TOPK + slot - 1;
        count += total;
      }
      len[s] = count;
    }
    __syncthreads();  // the token lists complete
    rt.mark(phase + 1);
#pragma unroll
    for (int s = 0; s < kMaxSegments; ++s) {
      if (s >= segments) break;
      T const *we = w + static_cast<size_t>(expert[s]) * N * K;
      expert_units<T, K, N, OUT_COLS, W13, TOPK>(x, we, y, lists + s * B, len[s], begin[s], end[s]);
    }
    if (u < hi) __syncthreads();  // the next segments rewrite the lists
  }
}

// The moe_linear types and shapes, checked once for both layers that stream expert weights.
template <typename T, int B, int E, int TOPK, int K, int N, int OUT_COLS, bool W13>
__device__ __forceinline__ void check_expert_shapes() {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "moe linears: bf16 or fp16 (tensor cores)");
  static_assert(K % 32 == 0, "moe linears: in_features must be a multiple of 32 (mma k-blocks)");
  static_assert(N % kUnitRows == 0, "moe linears: weight rows per expert must be a multiple of 16");
  static_assert(OUT_COLS == N || (W13 && OUT_COLS * 2 == N), "moe linears: output columns are N, or N / 2 (w13 fused)");
  static_assert(TOPK >= 1 && B >= 1 && E >= 1, "moe linears need tokens, experts and a top-k");
}

}  // namespace moe_detail

// Dynamic shared memory: the experts with tokens, and kMaxSegments token lists of up to B entries.
template <typename T, int B, int E, int TOPK, int K, int N, int OUT_COLS, bool W13>
constexpr unsigned moe_linear_smem_bytes() {
  return (E + moe_detail::kMaxSegments * B) * 4;
}

template <typename T, int B, int E, int TOPK, int K, int N, int OUT_COLS, bool W13>
__device__ __forceinline__ void moe_linear(TaskDesc const &task, Runtime const &rt) {
  moe_detail::check_expert_shapes<T, B, E, TOPK, K, N, OUT_COLS, W13>();
  moe_detail::expert_work<T, B, E, TOPK, K, N, OUT_COLS, W13>(
      task, rt, task.input<T const>(0), task.input<T const>(1), task.input<int32_t const>(2), B,
      task.input<int32_t const>(3), task.output<T>(0), reinterpret_cast<int *>(dynamic_smem), 0);
}

}  // namespace tasks
}  // namespace mpk
