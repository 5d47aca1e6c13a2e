// Top-k routing and the expert gate / up projection in one layer (declared in
// mpk_runtime/tasks/moe_topk_w13_linear.py): moe_topk_softmax_routing's routing data, computed in
// every task's shared memory from the router logits, then moe_w13_linear's work on it.
//
// Why: at decode batches the routing task is a short serial step (load the logits, k rounds of a
// warp arg-max, write the routing rows, publish) between the router and the expert weights, which
// then wait one more dependency hop and read the routing back. Here every task routes the active
// tokens itself (a warp per token, the same keys and order as moe_routing.cuh) and starts its
// share of the expert weights right after; the routing layer still runs, beside this one, for the
// down projection and the weighted sum. Each task holds E x B slots: batches of decode size.
// moe_group_w13_linear.cuh does the same with DeepSeek-V3's group routing (w13_after_routing).
#pragma once
#include <stdint.h>

#include "runtime/task_api.cuh"
#include "tasks/common/moe_linear.cuh"
#include "tasks/common/moe_routing.cuh"

namespace mpk {
namespace tasks {
namespace topk_w13_detail {

// Row stride of the slots in shared memory: odd, so that threads counting one expert each (stride
// apart) hit distinct banks.
template <int B>
__host__ __device__ constexpr int row_stride() {
  return B | 1;
}

// Every task: each active token's slots from route(t, lane, put) (a warp a token; put(e, slot) as
// topk_of_keys calls it), the expert mask of them, both in shared memory, then moe_w13_linear's work.
template <typename T, int B, int E, int TOPK, int K, int N, int OUT_COLS, typename Route>
__device__ __forceinline__ void w13_after_routing(TaskDesc const &task, Runtime const &rt, Route route) {
  moe_detail::check_expert_shapes<T, B, E, TOPK, K, N, OUT_COLS, true>();
  constexpr int RS = row_stride<B>();
  int const tokens = rt.active_rows(B);
  int const warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  int32_t *slots = reinterpret_cast<int32_t *>(dynamic_smem);  // [E][RS]: slot of (expert, token)
  int32_t *mask = slots + E * RS;                              // [E + 1]

  for (int t = warp; t < tokens; t += kWorkerWarps) route(t, lane, [&](int e, int slot) { slots[e * RS + t] = slot; });
  __syncthreads();  // every token's slots
  routing_detail::write_expert_mask<E>(
      [&](int i) {
        int const e = threadIdx.x + i * kWorkerThreads;
        int count = 0;
        for (int t = 0; t < tokens; ++t) count += slots[e * RS + t] != 0;
        return count;
      },
      mask);
  __syncthreads();
  rt.mark(0);  // the routing; expert_work marks phases 1 and 2
  moe_detail::expert_work<T, B, E, TOPK, K, N, OUT_COLS, true>(task, rt, task.input<T const>(0), task.input<T const>(1),
                                                               slots, RS, mask, task.output<T>(0), mask + E + 1, 1);
}

}  // namespace topk_w13_detail

// Dynamic shared memory: the slots [E][B | 1] and the expert mask [E + 1], then moe_linear's.
template <typename T, typename TL, int B, int E, int TOPK, int K, int N, int OUT_COLS>
constexpr unsigned moe_topk_w13_linear_smem_bytes() {
  return (E * topk_w13_detail::row_stride<B>() + E + 1) * 4 +
         moe_linear_smem_bytes<T, B, E, TOPK, K, N, OUT_COLS, true>();
}

template <typename T, typename TL, int B, int E, int TOPK, int K, int N, int OUT_COLS>
__device__ __forceinline__ void moe_topk_w13_linear(TaskDesc const &task, Runtime const &rt) {
  static_assert(E >= 1 && E <= 1024,
                "moe_topk_w13_linear: 1 to 1024 experts (a lane keeps E / 32 logits in registers)");
  static_assert(TOPK >= 1 && TOPK <= E && TOPK <= kWarpSize, "moe_topk_w13_linear: 1 <= top-k <= min(E, 32)");
  TL const *logits = task.input<TL const>(2);
  topk_w13_detail::w13_after_routing<T, B, E, TOPK, K, N, OUT_COLS>(task, rt, [&](int t, int lane, auto put) {
    float top;
    routing_detail::topk_of_token<TL, E, TOPK>(logits + static_cast<size_t>(t) * E, lane, put, top);
  });
}

}  // namespace tasks
}  // namespace mpk
