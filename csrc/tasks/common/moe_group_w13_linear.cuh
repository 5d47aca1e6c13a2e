// DeepSeek-V3's group routing and the expert gate / up projection in one layer (declared in
// mpk_runtime/tasks/moe_group_w13_linear.py): moe_topk_w13_linear with the choices of
// moe_sigmoid_group_routing. Every task routes the active tokens itself (group_choices_of_token, a
// warp per token) into its shared memory and then streams its share of the expert weights, so gate /
// up does not wait for the routing task and one more dependency hop; the routing layer still runs,
// beside this one, for the weights that the down projection and the weighted sum need.
#pragma once
#include <stdint.h>

#include "runtime/task_api.cuh"
#include "tasks/common/moe_group_routing.cuh"
#include "tasks/common/moe_topk_w13_linear.cuh"

namespace mpk {
namespace tasks {

template <typename T, typename TL, int B, int E, int TOPK, int K, int N, int OUT_COLS, int NG, int TG>
constexpr unsigned moe_group_w13_linear_smem_bytes() {
  return moe_topk_w13_linear_smem_bytes<T, TL, B, E, TOPK, K, N, OUT_COLS>();
}

template <typename T, typename TL, int B, int E, int TOPK, int K, int N, int OUT_COLS, int NG, int TG>
__device__ __forceinline__ void moe_group_w13_linear(TaskDesc const &task, Runtime const &rt) {
  TL const *logits = task.input<TL const>(2);
  float const *bias = task.input<float const>(3);
  group_routing_detail::check_score_bias<E>(task, rt, bias);
  topk_w13_detail::w13_after_routing<T, B, E, TOPK, K, N, OUT_COLS>(task, rt, [&](int t, int lane, auto put) {
    group_routing_detail::group_choices_of_token<TL, E, TOPK, NG, TG>(logits + static_cast<size_t>(t) * E, bias, lane,
                                                                      put, [](int, int, float) {});
  });
}

}  // namespace tasks
}  // namespace mpk
