// Linear: y[b, n] = sum_k x[b, k] * W[n, k] (+ r[b, n]) for this task's N_SLICE rows of W and the
// active rows of x. Memory bound at decode batch sizes, so the body is built around streaming W once:
//
// - W is the mma B operand (m16n8k16, bf16 / fp16, fp32 accumulate): lane (g, t) of a warp loads 16
//   bytes, 8 consecutive k of W row g, straight into registers (coalesced, L1 bypassed). The sum over
//   k does not care about order, so those 8 values feed two mma k-steps as they are; x's fragments are
//   loaded with the same k permutation (see kmap below).
// - Warps split K; each keeps RC row groups x U k-blocks of loads in flight; partial sums meet in
//   shared memory once per chunk of RC*8 rows, where the residual is added and y is written.
// - Shapes the fast path does not cover (fp32, K not a multiple of 32 per warp, ...) take a plain
//   CUDA-core path: correct everywhere, fast nowhere.
//
// rmsnorm_linear is the same body with the input's RMSNorm folded in: y = rmsnorm(x) @ W.T, where
// rmsnorm(x)[b, k] = x[b, k] * s[b] * nw[k] and s[b] = rsqrt(mean_k(x[b, k]^2) + eps). The row's s
// factors out of the sum, y[b, n] = s[b] * sum_k (x[b, k] nw[k]) W[n, k]: the mma gets x * nw
// (rounded to T), the same x loads give the sum of squares, and the epilogue scales by s. In a
// decoder that saves the RMSNorm task and its dependency hop; the normalized row is never stored.
// rmsnorm_linear_silu_mul (below) also folds in the SiLU-mul that follows a gate / up projection.
#pragma once
#include <stdint.h>

#include <type_traits>

#include "primitives/block.cuh"
#include "primitives/loads.cuh"
#include "primitives/mma.cuh"
#include "primitives/vec.cuh"
#include "primitives/warp.cuh"
#include "runtime/task_api.cuh"
#include "tasks/common/silu_mul.cuh"

namespace mpk {
namespace tasks {
namespace linear_detail {

template <typename T>
constexpr bool kTensorCoreType = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

__host__ __device__ constexpr int largest_divisor_up_to(int n, int limit) {
  for (int d = limit; d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// 8 values of x times 8 of nw, rounded to T (the mma's operand); adds the x^2 to ss.
template <typename T>
__device__ __forceinline__ uint4 times_norm_weight(uint4 xv, uint4 nv, float &ss) {
  union Pack {
    uint4 u;
    T v[8];
  };
  Pack a, b, o;
  a.u = xv, b.u = nv;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float const xf = to_float(a.v[e]);
    ss += xf * xf;
    o.v[e] = from_float<T>(xf * to_float(b.v[e]));
  }
  return o.u;
}

// Row groups of 8 a chunk streams at once. A decoder's slices are small (one to six groups of a
// few thousand k): at batch <= 16 all of a slice's groups (up to 8) go in one chunk, so the task
// waits for memory once, not once per chunk of 4 (a 48-row slice took two rounds of loads).
template <int BATCH, int N_SLICE>
__host__ __device__ constexpr int row_groups_per_chunk() {
  return BATCH <= 16 && N_SLICE / 8 >= 1 && N_SLICE / 8 <= 8 ? N_SLICE / 8 : largest_divisor_up_to(N_SLICE / 8, 4);
}

// k blocks of 32 a warp keeps in flight. A slice of one or two row groups (a decoder's o_proj and
// down: 8 rows of 2048 or 3072) takes as many as the registers allow for its weight fragments (RC
// a k block) and x's (2), so that it is one round of loads, not three; wider chunks keep 4 (more
// measured no better for the 4096 x 12288 MLP's down projection).
template <int MT, int RC, int NKB>
__host__ __device__ constexpr int k_blocks_in_flight() {
  return largest_divisor_up_to(NKB, MT == 1 ? (RC <= 2 ? 36 / (RC + 2) : 4) : (MT == 2 ? 2 : 1));
}

}  // namespace linear_detail

// Dynamic shared memory of a variant (same template arguments as linear): one fp32 partial per
// warp, batch row and chunk row.
template <typename T, int BATCH, int K, int N_SLICE, int OUT_STRIDE, bool RESIDUAL>
__host__ __device__ constexpr unsigned linear_smem_bytes() {
  return kWorkerWarps * BATCH * linear_detail::row_groups_per_chunk<BATCH, N_SLICE>() * 8 * 4;
}

// rmsnorm_linear's: linear's, then each warp's sum of squares per batch row, then the rows' scales.
template <typename T, int BATCH, int K, int N_SLICE, int OUT_STRIDE, bool RESIDUAL>
__host__ __device__ constexpr unsigned rmsnorm_linear_smem_bytes() {
  return linear_smem_bytes<T, BATCH, K, N_SLICE, OUT_STRIDE, RESIDUAL>() + (kWorkerWarps + 1) * BATCH * 4;
}

// rmsnorm_linear_silu_mul's: rmsnorm_linear's, then the slice's gate and up values ([batch][N_SLICE]).
template <typename T, int BATCH, int K, int N_SLICE, int OUT_STRIDE>
constexpr unsigned rmsnorm_linear_silu_mul_smem_bytes() {
  return rmsnorm_linear_smem_bytes<T, BATCH, K, N_SLICE, OUT_STRIDE, false>() + BATCH * N_SLICE * 4u;
}

namespace linear_detail {

template <typename T, int BATCH, int K, int N_SLICE, int OUT_STRIDE, bool RESIDUAL, bool NORM, bool GLU>
__device__ __forceinline__ void linear_body(TaskDesc const &task, Runtime const &rt) {
  static_assert(BATCH >= 1 && K >= 1 && N_SLICE >= 1, "linear needs a non-empty problem");
  static_assert(!(NORM && RESIDUAL), "rmsnorm_linear has no residual");
  static_assert(!GLU || (NORM && N_SLICE % 2 == 0), "the SiLU-mul epilogue pairs gate and up rows of one slice");
  T const *x = task.input<T const>(0);
  T const *w = task.input<T const>(1);
  T const *r = RESIDUAL ? task.input<T const>(2) : nullptr;
  T const *nw = NORM ? task.input<T const>(2) : nullptr;
  float const eps = NORM ? task.scalar_f(0) : 0.f;
  T *y = task.output<T>(0);
  int const rows = rt.active_rows(BATCH);
  // GLU: the slice's gate and up values, after rmsnorm_linear's shared memory
  float *pre =
      reinterpret_cast<float *>(dynamic_smem + rmsnorm_linear_smem_bytes<T, BATCH, K, N_SLICE, OUT_STRIDE, false>());

  constexpr bool kFast =
      linear_detail::kTensorCoreType<T> && BATCH <= 64 && K % (32 * kWorkerWarps) == 0 && N_SLICE % 8 == 0;
  if constexpr (kFast) {
    constexpr int MT = (BATCH + 15) / 16;  // 16-row batch tiles
    constexpr int GROUPS = N_SLICE / 8;
    constexpr int RC = row_groups_per_chunk<BATCH, N_SLICE>();
    constexpr int KW = K / kWorkerWarps;                                // k range of one warp
    constexpr int NKB = KW / 32;                                        // 32-wide k blocks per warp
    constexpr int U = k_blocks_in_flight<MT, RC, NKB>();
    int const warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    int const g = lane / 4, t = lane % 4;
    float *partial = reinterpret_cast<float *>(dynamic_smem);  // [warp][batch][RC * 8]
    float *squares = partial + kWorkerWarps * BATCH * RC * 8;  // NORM: [warp][batch]
    int const k_begin = warp * KW;

    for (int chunk = 0; chunk < GROUPS / RC; ++chunk) {
      float acc[RC][MT][4] = {};
      float ss_lo[MT] = {}, ss_hi[MT] = {};  // NORM: this lane's x^2 of rows m*16+g (+8); chunk 0's are kept
      T const *wrow = w + static_cast<size_t>(chunk * RC * 8 + g) * K + k_begin + 8 * t;
#pragma unroll 1
      for (int kb = 0; kb < NKB; kb += U) {
        uint4 wv[U][RC];
        uint4 xlo[U][MT], xhi[U][MT];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          int const k = k_begin + (kb + u) * 32 + 8 * t;
#pragma unroll
          for (int rc = 0; rc < RC; ++rc) wv[u][rc] = ld_stream_16(wrow + rc * 8 * K + (kb + u) * 32);
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            int const b_lo = m * 16 + g, b_hi = b_lo + 8;
            xlo[u][m] = b_lo < rows ? ld_16(x + static_cast<size_t>(b_lo) * K + k) : uint4{};
            xhi[u][m] = b_hi < rows ? ld_16(x + static_cast<size_t>(b_hi) * K + k) : uint4{};
          }
          if constexpr (NORM) {
            uint4 const nv = ld_16(nw + k);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
              xlo[u][m] = times_norm_weight<T>(xlo[u][m], nv, ss_lo[m]);
              xhi[u][m] = times_norm_weight<T>(xhi[u][m], nv, ss_hi[m]);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int rc = 0; rc < RC; ++rc)
#pragma unroll
            for (int m = 0; m < MT; ++m) {
              // k permutation: mma k 2t+j <- k 8t+j, mma k 2t+8+j <- k 8t+2+j (first step), +4 (second)
              mma_m16n8k16<T>(acc[rc][m], xlo[u][m].x, xhi[u][m].x, xlo[u][m].y, xhi[u][m].y, wv[u][rc].x, wv[u][rc].y);
              mma_m16n8k16<T>(acc[rc][m], xlo[u][m].z, xhi[u][m].z, xlo[u][m].w, xhi[u][m].w, wv[u][rc].z, wv[u][rc].w);
            }
      }
      if constexpr (NORM) {
        if (chunk == 0) {  // the warp's x^2 per row: lanes t = 0..3 hold a row's k in turn
#pragma unroll
          for (int m = 0; m < MT; ++m) {
#pragma unroll
            for (int o = 1; o < 4; o <<= 1) {
              ss_lo[m] += __shfl_xor_sync(0xffffffffu, ss_lo[m], o);
              ss_hi[m] += __shfl_xor_sync(0xffffffffu, ss_hi[m], o);
            }
            int const b_lo = m * 16 + g, b_hi = b_lo + 8;
            if (t == 0 && b_lo < BATCH) squares[warp * BATCH + b_lo] = ss_lo[m];
            if (t == 0 && b_hi < BATCH) squares[warp * BATCH + b_hi] = ss_hi[m];
          }
        }
      }
      // acc[rc][m]: c0, c1 = (batch m*16+g, rows rc*8+2t, +1); c2, c3 = (batch m*16+g+8, same rows)
#pragma unroll
      for (int rc = 0; rc < RC; ++rc)
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            int const b = m * 16 + g + 8 * h;
            if (b < BATCH) {
              float *p = partial + (warp * BATCH + b) * (RC * 8) + rc * 8 + 2 * t;
              p[0] = acc[rc][m][2 * h];
              p[1] = acc[rc][m][2 * h + 1];
            }
          }
      __syncthreads();
      for (int i = threadIdx.x; i < rows * RC * 8; i += kWorkerThreads) {
        int const b = i / (RC * 8), n = i % (RC * 8);
        float s = 0.f;
#pragma unroll
        for (int wp = 0; wp < kWorkerWarps; ++wp) s += partial[(wp * BATCH + b) * (RC * 8) + n];
        if constexpr (NORM) {
          float sq = 0.f;
#pragma unroll
          for (int wp = 0; wp < kWorkerWarps; ++wp) sq += squares[wp * BATCH + b];
          s *= rsqrtf(sq / K + eps);
        }
        int const col = chunk * RC * 8 + n;
        if constexpr (RESIDUAL) s += to_float(r[static_cast<size_t>(b) * OUT_STRIDE + col]);
        if constexpr (GLU)
          pre[b * N_SLICE + col] = to_float(from_float<T>(s));  // rounded as a gate / up output would be
        else
          y[static_cast<size_t>(b) * OUT_STRIDE + col] = from_float<T>(s);
      }
      __syncthreads();  // partial is free for the next chunk
    }
  } else {
    // Plain path: a warp per output row at a time, lanes across k (NORM: the rows' scales first).
    int const warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    float *scale = reinterpret_cast<float *>(dynamic_smem);  // NORM: [batch]
    if constexpr (NORM) {
      for (int b = 0; b < rows; ++b) {
        float ss = 0.f;
        for (int k = threadIdx.x; k < K; k += kWorkerThreads) {
          float const v = to_float(x[static_cast<size_t>(b) * K + k]);
          ss += v * v;
        }
        ss = block_reduce(ss, SumOp());
        if (threadIdx.x == 0) scale[b] = rsqrtf(ss / K + eps);
      }
      __syncthreads();
    }
    for (int n = warp; n < N_SLICE; n += kWorkerWarps) {
      T const *wr = w + static_cast<size_t>(n) * K;
      for (int b = 0; b < rows; ++b) {
        T const *xr = x + static_cast<size_t>(b) * K;
        float s = 0.f;
        for (int k = lane; k < K; k += kWarpSize)
          s += to_float(xr[k]) * (NORM ? to_float(nw[k]) : 1.f) * to_float(wr[k]);
        s = warp_reduce(s, SumOp());
        if constexpr (NORM) s *= scale[b];
        if (lane == 0) {
          if constexpr (RESIDUAL) s += to_float(r[static_cast<size_t>(b) * OUT_STRIDE + n]);
          if constexpr (GLU)
            pre[b * N_SLICE + n] = to_float(from_float<T>(s));
          else
            y[static_cast<size_t>(b) * OUT_STRIDE + n] = from_float<T>(s);
        }
      }
    }
    if constexpr (GLU) __syncthreads();
  }
  if constexpr (GLU) {  // y = silu(gate) * up: rows [0, N_SLICE / 2) of the slice are gate, the rest up
    constexpr int HALF = N_SLICE / 2;
    for (int i = threadIdx.x; i < rows * HALF; i += kWorkerThreads) {
      int const b = i / HALF, c = i % HALF;
      y[static_cast<size_t>(b) * OUT_STRIDE + c] =
          from_float<T>(silu(pre[b * N_SLICE + c]) * pre[b * N_SLICE + HALF + c]);
    }
  }
}

}  // namespace linear_detail

template <typename T, int BATCH, int K, int N_SLICE, int OUT_STRIDE, bool RESIDUAL>
__device__ __forceinline__ void linear(TaskDesc const &task, Runtime const &rt) {
  linear_detail::linear_body<T, BATCH, K, N_SLICE, OUT_STRIDE, RESIDUAL, false, false>(task, rt);
}

template <typename T, int BATCH, int K, int N_SLICE, int OUT_STRIDE, bool RESIDUAL>
__device__ __forceinline__ void rmsnorm_linear(TaskDesc const &task, Runtime const &rt) {
  linear_detail::linear_body<T, BATCH, K, N_SLICE, OUT_STRIDE, RESIDUAL, true, false>(task, rt);
}

// A decoder's gate / up projection of the normalized rows with the SiLU-mul folded in: y =
// silu(rmsnorm(x) @ Wg.T) * (rmsnorm(x) @ Wu.T). The task's N_SLICE weight rows are its gate rows
// then the matching up rows (shuffle_tensors with one group per task); each value is rounded to T
// as the gate / up output would be, then SiLU-mul runs in fp32 as silu_mul does. That saves the
// SiLU-mul task, its dependency hop and the (batch, 2 * I) intermediate.
template <typename T, int BATCH, int K, int N_SLICE, int OUT_STRIDE>
__device__ __forceinline__ void rmsnorm_linear_silu_mul(TaskDesc const &task, Runtime const &rt) {
  linear_detail::linear_body<T, BATCH, K, N_SLICE, OUT_STRIDE, false, true, true>(task, rt);
}

}  // namespace tasks
}  // namespace mpk
