// MoE routing (top-k, softmax over the kept k): for every active token t of the router logits
// (tokens x E), its TOPK largest logits in decreasing order, and
//   weights[t][j]   softmax of the kept logits (fp32): exp(l_j - l_0) / sum over the kept k
//   routing[e][t]   j + 1 if expert e is token t's j-th choice, else 0 (expert-major, row stride
//                   `rows`, the token dimension; columns of inactive tokens are not written)
//   mask[e]         the tokens routed to experts below e (an exclusive prefix count); mask[E] is
//                   tokens * TOPK, so expert e has mask[e + 1] - mask[e] tokens
// Ties resolve to the lower expert index; NaN logits count as -inf, and -0 as +0.
//
// One task (one CTA) sees every token. A warp per token (topk_of_token, which moe_topk_w13_linear
// shares) keeps the token's logits in registers
// (E / 32 a lane) as 64-bit keys that order by (value, lower index first), and finds the top k by k
// rounds of a warp arg-max. Slots are staged in shared memory per chunk of 32 tokens, so that the
// routing rows are written coalesced and each expert's count is summed there (route_tokens, which
// moe_group_routing.cuh shares).
#pragma once
#include <stdint.h>

#include "primitives/scan.cuh"
#include "primitives/vec.cuh"
#include "primitives/warp.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {
namespace routing_detail {

constexpr int kChunk = 32;            // tokens staged at once
constexpr int kStride = kChunk + 1;   // padded row of the staging area: lanes of a warp hit distinct banks

// A key whose unsigned order is (logit, then the lower expert index): the logit's bits made
// monotonic in the high half, the complement of the expert in the low half.
__device__ __forceinline__ unsigned long long key_of(float v, int e) {
  if (v != v) v = __uint_as_float(0xff800000u);  // NaN -> -inf
  if (v == 0.f) v = 0.f;                        // -0 -> +0: equal logits tie on the index
  uint32_t const bits = __float_as_uint(v);
  uint32_t const ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(e));
}

__device__ __forceinline__ float value_of(unsigned long long key) {
  uint32_t const ordered = static_cast<uint32_t>(key >> 32);
  uint32_t const bits = (ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered;
  return __uint_as_float(bits);
}

__device__ __forceinline__ int expert_of(unsigned long long key) {
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(key));
}

// One warp, one token: the TOPK largest of the E keys (E / 32 a lane: key[i] is expert lane + 32 i;
// 0 is below every expert's key, and is never picked while a key is left) in decreasing order.
// Calls picked(j, best) in every lane after the j-th pick (best: its key), then put(e, slot) once for
// every expert e < E, from the lane that holds it: slot j + 1 if e is the j-th pick, else 0. The keys
// are used up.
template <int E, int TOPK, typename Put, typename Picked>
__device__ __forceinline__ void topk_of_keys(unsigned long long (&key)[(E + kWarpSize - 1) / kWarpSize], int lane,
                                             Put put, Picked picked) {
  static_assert(TOPK <= kWarpSize, "a pick's slot (1..TOPK) must stay below every expert's key");
  constexpr int kPerLane = (E + kWarpSize - 1) / kWarpSize;
  // A picked key becomes its slot, j + 1: below every expert's key (whose high half is never 0), so
  // it is not picked again, and it is what put() hands over. No array of slots beside the keys.
#pragma unroll 1
  for (int j = 0; j < TOPK; ++j) {
    unsigned long long best = 0ull;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) best = key[i] > best ? key[i] : best;
    best = warp_max(best);
    int const e = expert_of(best);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + i * kWarpSize == e) key[i] = j + 1;
    picked(j, best);
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + i * kWarpSize < E) put(lane + i * kWarpSize, key[i] <= TOPK ? static_cast<int>(key[i]) : 0);
}

// One warp, one token: the TOPK largest of the E logits at `row` in decreasing order (ties: the lower
// expert first; NaN as -inf), by topk_of_keys. Returns, in lane j < TOPK, the j-th kept logit, and
// sets `top` (every lane) to the largest.
template <typename T, int E, int TOPK, typename Put>
__device__ __forceinline__ float topk_of_token(T const *row, int lane, Put put, float &top) {
  constexpr int kPerLane = (E + kWarpSize - 1) / kWarpSize;
  unsigned long long key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    int const e = lane + i * kWarpSize;
    key[i] = e < E ? key_of(to_float(row[e]), e) : 0ull;  // 0: below every expert's key
  }
  float kept = 0.f;  // lane j keeps the j-th choice's logit
  topk_of_keys<E, TOPK>(key, lane, put, [&](int j, unsigned long long best) {
    float const v = value_of(best);
    if (j == 0) top = v;
    if (lane == j) kept = v;
  });
  return kept;
}

// The whole CTA: the expert mask from the experts' token counts, mask[e] = the tokens routed to the
// experts below e and mask[E] = all of them. count(i) is the count of expert threadIdx.x + i *
// kWorkerThreads, asked only for experts below E.
template <int E, typename Count>
__device__ __forceinline__ void write_expert_mask(Count count, int32_t *mask) {
  int offset = 0;  // experts are numbered chunk by chunk of kWorkerThreads, in thread order
#pragma unroll
  for (int i = 0; i < (E + kWorkerThreads - 1) / kWorkerThreads; ++i) {
    int const e = threadIdx.x + i * kWorkerThreads;
    int const n = e < E ? count(i) : 0;
    int total;
    int const before = block_exclusive_sum(n, total);
    if (e < E) mask[e] = offset + before;
    offset += total;
  }
  if (threadIdx.x == 0) mask[E] = offset;
}

// The whole CTA, the layer's routing rows and expert mask: for every active token t of `rows`, a
// warp calls route(t, lane, put), which puts every expert's slot of the token (put(e, slot), as
// topk_of_token does) and writes its weights. Slots are staged in shared memory (E * kStride ints)
// a chunk of kChunk tokens at a time, then written expert-major and counted per expert.
template <int E, typename Route>
__device__ __forceinline__ void route_tokens(Runtime const &rt, int rows, Route route, int32_t *routing,
                                             int32_t *mask) {
  constexpr int kPerThread = (E + kWorkerThreads - 1) / kWorkerThreads;
  int const tokens = rt.active_rows(rows);
  int const warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  int *slots = reinterpret_cast<int *>(dynamic_smem);  // [E][kStride]: slot of (expert, token in chunk)
  int count[kPerThread] = {};                           // tokens of experts threadIdx.x + i * kWorkerThreads

  for (int base = 0; base < tokens; base += kChunk) {
    int const n = min(kChunk, tokens - base);
    for (int tl = warp; tl < n; tl += kWorkerWarps)
      route(base + tl, lane, [&](int e, int slot) { slots[e * kStride + tl] = slot; });
    __syncthreads();
    for (int i = threadIdx.x; i < E * n; i += kWorkerThreads) {
      int const e = i / n, tl = i % n;
      routing[static_cast<size_t>(e) * rows + base + tl] = slots[e * kStride + tl];
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      int const e = threadIdx.x + i * kWorkerThreads;
      if (e < E)
        for (int tl = 0; tl < n; ++tl) count[i] += slots[e * kStride + tl] != 0;
    }
    __syncthreads();  // the staging area is rewritten by the next chunk
  }

  write_expert_mask<E>([&](int i) { return count[i]; }, mask);
}

}  // namespace routing_detail

template <typename T, int E, int TOPK>
constexpr unsigned moe_routing_smem_bytes() {
  return E * routing_detail::kStride * 4;
}

template <typename T, int E, int TOPK>
__device__ __forceinline__ void moe_topk_softmax_routing(TaskDesc const &task, Runtime const &rt) {
  static_assert(E >= 1 && E <= 1024, "moe routing: 1 to 1024 experts (a lane keeps E / 32 logits in registers)");
  static_assert(TOPK >= 1 && TOPK <= E && TOPK <= kWarpSize, "moe routing: 1 <= top-k <= min(E, 32)");
  T const *logits = task.input<T const>(0);
  float *weights = task.output<float>(0);
  int const rows = task.scalar_i(0);  // the token dimension: routing's row stride
  routing_detail::route_tokens<E>(
      rt, rows,
      [&](int t, int lane, auto put) {
        float top = 0.f;
        float const kept =
            routing_detail::topk_of_token<T, E, TOPK>(logits + static_cast<size_t>(t) * E, lane, put, top);
        float const p = lane < TOPK ? expf(kept - top) : 0.f;
        float const sum = warp_sum(p);
        if (lane < TOPK) weights[static_cast<size_t>(t) * TOPK + lane] = p / sum;
      },
      task.output<int32_t>(1), task.output<int32_t>(2));
}

}  // namespace tasks
}  // namespace mpk
