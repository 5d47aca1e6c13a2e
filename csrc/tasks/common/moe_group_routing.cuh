// MoE routing, DeepSeek-V3 style (declared in mpk_runtime/tasks/moe_group_routing.py; the math is
// reference/moe_sigmoid_group_routing/pytorch_reference.py). For every active token t of the router
// logits (tokens x E):
//   s[e] = sigmoid(logit[e]) (fp32, NaN as -inf), c[e] = s[e] + bias[e]   (the choice scores)
//   group g = experts [g * E / NG, (g + 1) * E / NG); its score: the sum of its two largest c
//   the TG best groups kept; the token's TOPK choices: the largest c of the kept groups' experts
//   weights[t][j]  s of the j-th choice, / the sum of the TOPK (NORM), * the scaling factor
//   routing, mask  as moe_topk_softmax_routing writes them (route_tokens)
// Ties resolve to the lower index (expert or group), through the keys of moe_routing.cuh.
//
// A warp per token, E / 32 experts a lane as in moe_routing.cuh. A group's best two are values only
// (their sum is all that counts), so every lane first keeps the best two of its own experts of each
// group and one butterfly merges the pairs of all NG groups at once: NG independent chains of five
// steps, not two dependent warp arg-maxes a group. Every lane then holds every group's score and
// counts, for each group, the groups ahead of it (NG * NG compares, no shuffle; a lane's own group
// picked out of the array would put the array in local memory). The choices come from
// topk_of_keys over the kept experts' keys; the owner lane of each choice hands its score over with
// a shuffle. All of this but the weights is group_choices_of_token, which moe_group_w13_linear.cuh
// shares.
#pragma once
#include <stdint.h>

#include "primitives/warp.cuh"
#include "runtime/task_api.cuh"
#include "tasks/common/moe_routing.cuh"

namespace mpk {
namespace tasks {
namespace group_routing_detail {

// (first >= second) becomes the best two of {first, second, v}.
__device__ __forceinline__ void insert_pair(float v, float &first, float &second) {
  second = fmaxf(second, fminf(first, v));
  first = fmaxf(first, v);
}

// (first >= second) becomes the best two of {first, second, b, c}, where b >= c.
__device__ __forceinline__ void merge_pairs(float b, float c, float &first, float &second) {
  second = fmaxf(fminf(first, b), fmaxf(second, c));
  first = fmaxf(first, b);
}

// The whole CTA: a score_bias that is NaN or infinite stops the launch (MPK_TASK_ERROR_VALUE, value:
// the expert), as the choice scores could not be ordered with it (a NaN compares false with all).
template <int E>
__device__ __forceinline__ void check_score_bias(TaskDesc const &task, Runtime const &rt, float const *bias) {
  for (int e = threadIdx.x; e < E; e += kWorkerThreads)
    if ((__float_as_uint(bias[e]) & 0x7f800000u) == 0x7f800000u) rt.fail(task, MPK_TASK_ERROR_VALUE, e);
}

// One warp, one token: the group-limited choices of the router logits at `row` (the TOPK largest
// choice scores of the TG best groups' experts, largest first). Calls put(e, slot) as topk_of_keys
// does, and picked(j, e, mine) in every lane after the j-th choice e, where `mine` is the sigmoid
// score of e in the lane that holds e (0 in the others): the routing layer hands it over for the
// weights, gate / up (moe_group_w13_linear) needs only the slots.
template <typename T, int E, int TOPK, int NG, int TG, typename Put, typename Picked>
__device__ __forceinline__ void group_choices_of_token(T const *row, float const *bias, int lane, Put put,
                                                       Picked picked) {
  static_assert(E >= 2 && E <= 1024, "moe group routing: 2 to 1024 experts (a lane keeps E / 32 scores)");
  static_assert(NG >= 1 && NG <= kWarpSize && E % NG == 0 && E / NG >= 2, "moe group routing: groups of 2+ experts");
  static_assert(TG >= 1 && TG <= NG, "moe group routing: 1 <= kept groups <= groups");
  static_assert(TOPK >= 1 && TOPK <= TG * (E / NG) && TOPK <= kWarpSize, "moe group routing: 1 <= top-k <= 32");
  using namespace routing_detail;
  constexpr int kPerLane = (E + kWarpSize - 1) / kWarpSize, kGroupSize = E / NG;
  float score[kPerLane], choice[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    int const e = lane + i * kWarpSize;
    float v = e < E ? to_float(row[e]) : 0.f;
    if (v != v) v = __uint_as_float(0xff800000u);  // NaN -> -inf: score 0
    score[i] = 1.f / (1.f + expf(-v));
    choice[i] = e < E ? score[i] + bias[e] : 0.f;
  }
  // Each group's best two choice scores (values: -inf until seen), per lane, then over the warp.
  float top1[NG], top2[NG];
#pragma unroll
  for (int g = 0; g < NG; ++g) top1[g] = top2[g] = __uint_as_float(0xff800000u);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    int const e = lane + i * kWarpSize;
#pragma unroll
    for (int g = 0; g < NG; ++g) {
      // Only the groups that expert lane + 32 i is in for some lane (constants once unrolled). Each
      // takes -inf (no change) from the lanes whose expert is not in it: an insert under a branch
      // let the compiler index top1 / top2 by the group, which put them in local memory.
      if (g < i * kWarpSize / kGroupSize || g > (i * kWarpSize + kWarpSize - 1) / kGroupSize) continue;
      insert_pair(e < E && e / kGroupSize == g ? choice[i] : __uint_as_float(0xff800000u), top1[g], top2[g]);
    }
  }
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o /= 2) {
#pragma unroll
    for (int g = 0; g < NG; ++g) {
      float const b = __shfl_xor_sync(0xffffffffu, top1[g], o), c = __shfl_xor_sync(0xffffffffu, top2[g], o);
      merge_pairs(b, c, top1[g], top2[g]);
    }
  }
  float group_score[NG];  // in every lane
#pragma unroll
  for (int g = 0; g < NG; ++g) group_score[g] = top1[g] + top2[g];
  // Group g is kept if fewer than TG groups are ahead of it: a higher score, or the same and a lower index.
  uint32_t kept_groups = 0u;  // bit g: group g kept
#pragma unroll
  for (int g = 0; g < NG; ++g) {
    int ahead = 0;
#pragma unroll
    for (int h = 0; h < NG; ++h)
      ahead += group_score[h] > group_score[g] || (group_score[h] == group_score[g] && h < g);
    kept_groups |= static_cast<uint32_t>(ahead < TG) << g;
  }
  // The choices: the TOPK largest keys of the kept groups' experts.
  unsigned long long key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    int const e = lane + i * kWarpSize;
    key[i] = e < E && (kept_groups >> (e / kGroupSize)) & 1u ? key_of(choice[i], e) : 0ull;
  }
  topk_of_keys<E, TOPK>(key, lane, put, [&](int j, unsigned long long best) {
    int const e = expert_of(best);
    float mine = 0.f;  // the owner lane's score of e
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + i * kWarpSize == e) mine = score[i];
    picked(j, e, mine);
  });
}

}  // namespace group_routing_detail

template <typename T, int E, int TOPK, int NG, int TG, bool NORM>
constexpr unsigned moe_group_routing_smem_bytes() {
  return E * routing_detail::kStride * 4;
}

template <typename T, int E, int TOPK, int NG, int TG, bool NORM>
__device__ __forceinline__ void moe_sigmoid_group_routing(TaskDesc const &task, Runtime const &rt) {
  using namespace routing_detail;
  using namespace group_routing_detail;

  T const *logits = task.input<T const>(0);
  float const *bias = task.input<float const>(1);
  float *weights = task.output<float>(0);
  float const scale = task.scalar_f(0);
  int const rows = task.scalar_i(1);  // the token dimension: routing's row stride

  check_score_bias<E>(task, rt, bias);
  route_tokens<E>(
      rt, rows,
      [&](int t, int lane, auto put) {
        float kept = 0.f;  // lane j keeps the j-th choice's score
        group_choices_of_token<T, E, TOPK, NG, TG>(logits + static_cast<size_t>(t) * E, bias, lane, put,
                                                   [&](int j, int e, float mine) {
                                                     float const s = __shfl_sync(0xffffffffu, mine, e % kWarpSize);
                                                     if (lane == j) kept = s;
                                                   });
        float const sum = NORM ? warp_sum(lane < TOPK ? kept : 0.f) : 1.f;
        float const norm = NORM ? sum + 1e-20f : 1.f;
        if (lane < TOPK) weights[static_cast<size_t>(t) * TOPK + lane] = kept / norm * scale;
      },
      task.output<int32_t>(1), task.output<int32_t>(2));
}

}  // namespace tasks
}  // namespace mpk
