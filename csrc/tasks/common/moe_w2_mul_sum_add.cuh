// The down projection and the weighted sum of an MoE block in one layer (declared in
// mpk_runtime/tasks/moe_w2_mul_sum_add.py): for the active tokens t,
//   out[t][c] = residual[t][c] + sum_j weights[t][j] * (x[t][j] . W[e_j][c])
// with e_j the token's j-th expert (routing[e][t] = j + 1, see moe_routing.cuh), fp32 throughout and
// one rounding to T. It is moe_w2_linear followed by moe_mul_sum_add, without the (tokens, k, H)
// intermediate, its rounding, the combine layer and the dependency hop between the two.
//
// Work split. The sum over a token's experts needs every expert's rows of a column in one task, so
// the layer's tasks own columns (grid x cuts H into C-wide slices, C a multiple of 16) and each
// streams the rows of its columns of every expert with tokens. A unit is 16 rows (one expert); the
// n experts with tokens give a task n * C / 16 units, and warp w takes units w, w + kWorkerWarps, ...
// with moe_linear.cuh's expert_unit (the weight as the B operand, straight into registers, the next
// step asked of L2). The tasks' shares are equal whatever the routing.
//
// The sum. Each warp accumulates its units' weighted results in fp32 rows of its own in shared
// memory (a unit's lanes hold distinct (token, column) pairs, so no two lanes add to one word), in
// unit order; at the end the threads add the residual and the warps' rows in warp order. The order
// of every sum is fixed by the routing, so a run gives the same bits every time.
#pragma once
#include <stdint.h>

#include "primitives/loads.cuh"
#include "primitives/scan.cuh"
#include "primitives/vec.cuh"
#include "runtime/task_api.cuh"
#include "tasks/common/moe_linear.cuh"

namespace mpk {
namespace tasks {
namespace w2sum_detail {

// A warp's row stride of sums: odd, so that the 8 tokens of one store of a unit hit distinct banks.
template <int C>
__host__ __device__ constexpr int acc_stride() {
  return C + 1;
}

// 32-bit words of shared memory per warp: its sums [B][C + 1], its token list [B] and their weights [B].
template <int B, int C>
__host__ __device__ constexpr int warp_words() {
  return B * acc_stride<C>() + 2 * B;
}

}  // namespace w2sum_detail

// Dynamic shared memory: the experts with tokens [E], then per warp its sums, list and weights.
template <typename T, int B, int E, int TOPK, int K, int C, int H>
constexpr unsigned moe_w2_mul_sum_add_smem_bytes() {
  return (E + kWorkerWarps * w2sum_detail::warp_words<B, C>()) * 4;
}

template <typename T, int B, int E, int TOPK, int K, int C, int H>
__device__ __forceinline__ void moe_w2_mul_sum_add(TaskDesc const &task, Runtime const &rt) {
  moe_detail::check_expert_shapes<T, B, E, TOPK, K, H, H, false>();
  static_assert(C % moe_detail::kUnitRows == 0 && H % C == 0,
                "moe_w2_mul_sum_add: the grid cuts H into slices of a multiple of 16 columns");
  using namespace moe_detail;
  constexpr int UPE = C / kUnitRows;  // units of an expert in this task's columns
  constexpr int AS = w2sum_detail::acc_stride<C>();
  T const *x = task.input<T const>(0);
  T const *w = task.input<T const>(1);  // row c0 of expert 0: expert e's rows are H * K further per e
  int32_t const *routing = task.input<int32_t const>(2);
  int32_t const *mask = task.input<int32_t const>(3);
  float const *topk_weights = task.input<float const>(4);
  T const *residual = task.input<T const>(5);
  T *out = task.output<T>(0);
  int const tokens = rt.active_rows(B);
  int const warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  int *active = reinterpret_cast<int *>(dynamic_smem);  // [E] experts with tokens, in order
  float *sums = reinterpret_cast<float *>(active + E);
  float *my_sums = sums + warp * w2sum_detail::warp_words<B, C>();  // [B][AS]
  int *my_list = reinterpret_cast<int *>(my_sums + B * AS);        // [B] rows token * TOPK + slot
  float *my_weights = reinterpret_cast<float *>(my_list + B);      // [B] their routing weights

  // The residual of this thread's first (token, 16-byte chunk) of the output, asked for now: its
  // latency passes while the units stream, instead of after them.
  constexpr int V = kVec16<T>, PER_ROW = C / V;
  int const pairs = tokens * PER_ROW;
  union {
    uint4 raw;
    T v[V];
  } first_residual;
  if (static_cast<int>(threadIdx.x) < pairs)
    first_residual.raw = ld_16(residual + static_cast<size_t>(threadIdx.x / PER_ROW) * H + threadIdx.x % PER_ROW * V);
  for (int i = lane; i < tokens * AS; i += kWarpSize) my_sums[i] = 0.f;
  int const units = routed_experts<E>(mask, active) * UPE;
  rt.mark(0);
  auto weights_of = [&](int u) { return w + static_cast<size_t>(active[u / UPE]) * H * K; };
  if (warp < units)  // this warp's first unit: in L2 by the time its token list is built
    prefetch_rows<T, kblocks_in_flight<K, 1>() * 32>(
        weights_of(warp) + static_cast<size_t>(tile_row<H, false>(warp % UPE, 0) + g) * K,
        weights_of(warp) + static_cast<size_t>(tile_row<H, false>(warp % UPE, 1) + g) * K, 0);

  for (int u = warp; u < units; u += kWorkerWarps) {
    int const unit = u % UPE;
    int32_t const *row = routing + static_cast<size_t>(active[u / UPE]) * B;
    int count = 0;
    for (int base = 0; base < tokens; base += kWarpSize) {
      int const tok = base + lane;
      int const slot = tok < tokens ? row[tok] : 0;
      if (slot < 0 || slot > TOPK) rt.fail(task, MPK_TASK_ERROR_INDEX, slot);
      int const routed = slot > 0 && slot <= TOPK;
      int const upto = warp_inclusive_sum(routed);
      if (routed) {
        my_list[count + upto - 1] = tok * TOPK + slot - 1;
        my_weights[count + upto - 1] = topk_weights[tok * TOPK + slot - 1];
      }
      count += __shfl_sync(0xffffffffu, upto, kWarpSize - 1);
    }
    __syncwarp();  // the list
    for (int b = 0; b < count; b += kMaxTile) {
      bool const last = b + kMaxTile >= count, more = u + kWorkerWarps < units;
      int const next = last && more ? (u + kWorkerWarps) % UPE : -1;
      expert_unit_any<T, K, H, false, TOPK>(
          x, weights_of(u), my_list + b, min(kMaxTile, count - b), unit, more ? weights_of(u + kWorkerWarps) : nullptr,
          next, [&](int i, int c, float lo, float hi) {
            float *s = my_sums + (my_list[b + i] / TOPK) * AS + kUnitRows * unit + 2 * t + c;
            float const wt = my_weights[b + i];
            s[0] += wt * lo;  // row 16 unit + 2t + c
            s[8] += wt * hi;  // row 16 unit + 8 + 2t + c
          });
    }
    __syncwarp();  // the next unit rewrites the list
  }
  __syncthreads();  // every warp's sums
  rt.mark(1);

  for (int i = threadIdx.x; i < pairs; i += kWorkerThreads) {
    int const tok = i / PER_ROW, c = (i % PER_ROW) * V;
    float acc[V];
    if (i == static_cast<int>(threadIdx.x)) {
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = to_float(first_residual.v[e]);
    } else {
      load16(residual + static_cast<size_t>(tok) * H + c, acc);
    }
    for (int wp = 0; wp < kWorkerWarps; ++wp) {
      float const *s = sums + wp * w2sum_detail::warp_words<B, C>() + tok * AS + c;
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] += s[e];
    }
    store16(out + static_cast<size_t>(tok) * H + c, acc);
  }
}

}  // namespace tasks
}  // namespace mpk
