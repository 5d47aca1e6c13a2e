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
// A warp per token, E / 32 experts a lane as in moe_routing.cuh. Each group's best two come from two
// warp arg-maxes over the lanes' keys of that group (2 NG of them), the kept groups from TG rounds
// over lane g's group key, the choices from topk_of_keys over the kept experts' keys; the owner lane
// of each choice hands its score over with a shuffle.
#pragma once
#include <stdint.h>

#include "primitives/warp.cuh"
#include "runtime/task_api.cuh"
#include "tasks/common/moe_routing.cuh"

namespace mpk {
namespace tasks {
template <typename T, int E, int TOPK, int NG, int TG, bool NORM>
constexpr unsigned moe_group_routing_smem_bytes() {
  return E * routing_detail::kStride * 4;
}

template <typename T, int E, int TOPK, int NG, int TG, bool NORM>
__device__ __forceinline__ void moe_sigmoid_group_routing(TaskDesc const &task, Runtime const &rt) {
  static_assert(E >= 2 && E <= 1024, "moe group routing: 2 to 1024 experts (a lane keeps E / 32 scores)");
  static_assert(NG >= 1 && NG <= kWarpSize && E % NG == 0 && E / NG >= 2, "moe group routing: groups of 2+ experts");
  static_assert(TG >= 1 && TG <= NG, "moe group routing: 1 <= kept groups <= groups");
  static_assert(TOPK >= 1 && TOPK <= TG * (E / NG) && TOPK <= kWarpSize, "moe group routing: 1 <= top-k <= 32");
  using namespace routing_detail;
  constexpr int kPerLane = (E + kWarpSize - 1) / kWarpSize, kGroupSize = E / NG;

  T const *logits = task.input<T const>(0);
  float const *bias = task.input<float const>(1);
  float *weights = task.output<float>(0);
  float const scale = task.scalar_f(0);
  int const rows = task.scalar_i(1);  // the token dimension: routing's row stride

  route_tokens<E>(
      rt, rows,
      [&](int t, int lane, auto put) {
        T const *row = logits + static_cast<size_t>(t) * E;
        float score[kPerLane], choice[kPerLane];
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          int const e = lane + i * kWarpSize;
          float v = e < E ? to_float(row[e]) : 0.f;
          if (v != v) v = __uint_as_float(0xff800000u);  // NaN -> -inf: score 0
          score[i] = 1.f / (1.f + expf(-v));
          choice[i] = e < E ? score[i] + bias[e] : 0.f;
        }
        // Each group's score, the sum of its best two; lane g keeps group g's as a key.
        unsigned long long group_key = 0ull;
#pragma unroll 1
        for (int g = 0; g < NG; ++g) {
          auto best_of_group = [&](int skip) {
            unsigned long long k = 0ull;
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
              int const e = lane + i * kWarpSize;
              if (e < E && e / kGroupSize == g && e != skip) {
                unsigned long long const c = key_of(choice[i], e);
                k = c > k ? c : k;
              }
            }
            return warp_reduce(k, MaxOp());
          };
          unsigned long long const first = best_of_group(-1);
          unsigned long long const second = best_of_group(expert_of(first));
          if (lane == g) group_key = key_of(value_of(first) + value_of(second), g);
        }
        uint32_t kept_groups = 0u;  // bit g: group g kept
#pragma unroll 1
        for (int j = 0; j < TG; ++j) {
          unsigned long long const best = warp_reduce((kept_groups >> lane) & 1u ? 0ull : group_key, MaxOp());
          kept_groups |= 1u << expert_of(best);
        }
        // The choices: the TOPK largest keys of the kept groups' experts; lane j keeps the j-th one's score.
        unsigned long long key[kPerLane];
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          int const e = lane + i * kWarpSize;
          key[i] = e < E && (kept_groups >> (e / kGroupSize)) & 1u ? key_of(choice[i], e) : 0ull;
        }
        float kept = 0.f;
        topk_of_keys<E, TOPK>(key, lane, put, [&](int j, unsigned long long best) {
          int const e = expert_of(best);
          float mine = 0.f;  // the owner lane's score of e
#pragma unroll
          for (int i = 0; i < kPerLane; ++i)
            if (lane + i * kWarpSize == e) mine = score[i];
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
