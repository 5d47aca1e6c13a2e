// The speed of light of issue 14's MoE block at one token on this GPU: how fast can the block be
// when the experts' gate / up and down are one pass (no hop between them) and nothing but the
// dependent steps every such body has is kept, without the math? bench_moe_ceiling.py builds it and
// compares it with the block's floor (the routed experts' and the router's bytes / copy bandwidth).
//
// Qwen3-30B-A3B's block (128 experts, top 8, hidden 2048, expert intermediate 768, bf16), `blocks`
// of them chained in one launch as decoder layers are: block b + 1 starts from block b's output. One
// persistent CTA an SM (256 threads, a cooperative launch) takes, in every block:
//   router: CTAs 0 .. 15 wait for the previous block's combine, each reads its 32 KB of the router's
//           weights (16-byte loads) and writes its 8 logits (router 0: no router CTAs; the expert
//           CTAs start from the previous block's combine with logits made up in place, a router
//           that costs nothing);
//   route:  every CTA waits for the 16 router CTAs (a count), reads the 128 logits and takes their
//           top 8 (warp 0, 8 rounds of a warp arg-max), as a body that routes itself does;
//   stream: its share of the routed experts' bytes: the 8 x 48 units (16 intermediate rows: their
//           gate and up rows, 128 KB, and the same 16 columns of w2, 64 KB) split evenly over the
//           CTAs; first the gate / up rows of its units, then their w2 columns (layout 0: w2 as the
//           model keeps it, (H, I) an expert, so a unit's columns are 32 bytes of each of 2048 rows;
//           layout 1: transposed, (I, H), 16 contiguous rows). 16-byte cp.async by every thread into
//           `stages` stages of `stage_kb` KB, each stage read back by the thread that copied it (no
//           math); sync 1: a __syncthreads after each stage's wait, as a body whose warps share a
//           stage needs; copy 1 (sm90 on, 32 KB stages): thread 0 issues each stage through the TMA
//           unit instead, counted on the stage's mbarrier (contiguous rows: one bulk copy; w2's
//           32-byte pieces: tensor copies of 256 rows from a tensor map of w2), every thread reads
//           its 16-byte chunks of the stage, and a __syncthreads hands the stage back;
//   partial: its 2048 fp32 sums written, a fence, a count;
//   combine: every CTA waits for all partials; CTA c < 128 sums columns 16c .. 16c + 15 over every
//           partial and writes them as bf16 (the block's output), and every CTA counts itself done;
//           combine 0: instead of both, every CTA adds its 2048 sums to an fp32 output (atomics,
//           zeroed before the launch: an output no bf16 layer could read, and an order of sums that
//           changes from run to run) and counts itself done.
// The routed experts change from block to block (16 sets of 8 cover all 128 experts), so none is in
// L2 when its block reads it. One launch also checks what was streamed: the sum over every chunk read
// of the xor of its four words, against the same sum over the routed experts' bytes. Printed: the per-block time
// (T(blocks) - T(2)) / (blocks - 2), and the medians over CTAs of one block's phases (route, stream, partial, the wait
// for the last partial, combine).
//
//   moe_ceiling blocks stages stage_kb layout sync router combine copy
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ceiling_program.cuh"
#include "primitives/cp_async.cuh"
#include "primitives/tma.cuh"

constexpr int kE = 128, kTopk = 8, kH = 2048, kI = 768, kUnitRows = 16;
constexpr int kUnits = kTopk * (kI / kUnitRows);    // units a block streams: 384
constexpr long long kExpertElems = 3LL * kI * kH;  // w13 (2I, H), then w2 (H, I) or (I, H)
constexpr int kRouterCtas = 16, kThreads = 256, kSlices = kH / 16;
constexpr int kUnitChunks = kUnitRows * kH * 2 / 16;  // 16-byte chunks of a unit's gate rows (its up rows, its w2)
constexpr int kStamps = 6;                            // a CTA's marks in a block: see `marks`

struct Params {
  uint16_t const *w;       // kE experts of kExpertElems
  uint16_t const *wr;      // the routers' weights: blocks x kE x kH
  float *logits;           // blocks x kE
  float *partial;          // blocks x CTAs x kH
  float *sums;             // blocks x kH (combine 0)
  __nv_bfloat16 *out;      // blocks x kH
  unsigned *count;         // blocks x 3: routers done, partials written, combines done
  unsigned long long *stamps;  // CTAs x kStamps, of block `stamp_block`
  unsigned long long *checksum;  // every CTA adds its `streamed`
  mpk::TensorMap const *w2_map;  // copy 1: w2 of every expert, (E, H, I), a box 16 columns x 256 rows
  int blocks, first, layout, sync, router, combine, copy, stamp_block;
};

// Thread 0 spins until *c reaches `target` (acquire), then the CTA goes on.
__device__ __forceinline__ void wait_count(unsigned const *c, unsigned target) {
  if (threadIdx.x == 0) {
    unsigned v;
    do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
    while (v < target);
  }
  __syncthreads();
}

// Every thread's writes before, then one count (release).
__device__ __forceinline__ void add_count(unsigned *c) {
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}

// The experts block `g` of the whole run routes: one of 16 sets of 8, which together cover all 128.
__device__ __forceinline__ float logit_of(int g, int e) {
  return e % 16 == g % 16 ? 4.f + 0.01f * (e / 16) : -0.001f * e;
}

constexpr int kTmaStage = 32 * 1024;  // copy 1's stage: a bulk copy, or 4 tensor copies of 256 w2 rows

// One bulk copy of `bytes` contiguous bytes (16-byte aligned) through the TMA unit, counted on `bar`.
__device__ __forceinline__ void bulk_copy(void *dst, void const *src, unsigned bytes, uint64_t *bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(bytes), "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))
               : "memory");
#else
  __trap();
#endif
}

// The CTA's stream is a list of 64 KB segments, each of one unit: its gate rows, its up rows (each
// contiguous), and later its w2 columns (layout 0: 32 bytes of each of 2048 rows; layout 1: 16
// contiguous rows). A stage (16, 32 or 64 KB) lies in one segment, so a chunk's address is the
// segment's base plus a shift: the address costs a few instructions, as a body's would.
constexpr int kMaxSegments = 48;

__device__ __forceinline__ uint16_t const *chunk_of(uint16_t const *base, bool strided, int c) {
  return strided ? base + (c >> 1) * kI + (c & 1) * 8 : base + c * 8;
}

template <int kStages>
__global__ void __launch_bounds__(kThreads) moe_block(__grid_constant__ const Params p) {
  extern __shared__ __align__(128) unsigned char dyn[];  // the stages
  __shared__ int routed[kTopk];
  __shared__ uint16_t const *segment[kMaxSegments];
  __shared__ int segment_expert[kMaxSegments], segment_column[kMaxSegments];
  __shared__ uint64_t bars[kStages];  // copy 1: a stage's bytes landed
  __shared__ float column_sums[16][16];
  int const me = blockIdx.x, ctas = gridDim.x, tid = threadIdx.x;
  unsigned dyn_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));
  int const chunks_a_stage = static_cast<int>(dyn_bytes / kStages / 16);
  int const mine_a_stage = chunks_a_stage / kThreads;
  unsigned acc = 0;               // the router's weights, as read
  unsigned long long streamed = 0;  // the sum of every streamed 16-byte chunk's xor of its 4 words
  int used = 0;  // copy 1: stages this CTA has used so far, which give each stage's slot and parity
  if (p.copy && tid == 0)
    for (int k = 0; k < kStages; ++k) mpk::mbarrier_init(bars + k, 1);
  __syncthreads();

  for (int b = 0; b < p.blocks; ++b) {
    unsigned long long marks[kStamps] = {};
    unsigned *count = p.count + 3 * b;
    int const g = p.first + b;  // the block's number in the whole run: which experts it routes
    // router
    if (p.router && me < kRouterCtas) {
      if (b > 0) wait_count(p.count + 3 * (b - 1) + 2, ctas);
      uint4 const *wr = reinterpret_cast<uint4 const *>(p.wr + (static_cast<long long>(b) * kE + me * 8) * kH);
      unsigned sum = 0;
      for (int i = tid; i < 8 * kH / 8; i += kThreads) {
        uint4 v;
        asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(wr + i));
        sum ^= v.x ^ v.y ^ v.z ^ v.w;
      }
      sum = __reduce_xor_sync(~0u, sum);
      if (tid % 32 == 0) acc ^= sum;
      if (tid < 8) p.logits[b * kE + me * 8 + tid] = logit_of(g, me * 8 + tid) + (sum == 0x9e3779b9u ? 1.f : 0.f);
      __threadfence();
      add_count(count);
    }
    // route
    if (p.router)
      wait_count(count, kRouterCtas);
    else if (b > 0)
      wait_count(p.count + 3 * (b - 1) + 2, ctas);
    marks[0] = now_ns();
    if (tid < 32) {
      float v[4];
      for (int j = 0; j < 4; ++j) {
        int const e = tid + 32 * j;
        v[j] = p.router ? p.logits[b * kE + e] : logit_of(g, e);
      }
      for (int k = 0; k < kTopk; ++k) {
        float best = v[0];
        int at = tid;
        for (int j = 1; j < 4; ++j)
          if (v[j] > best) best = v[j], at = tid + 32 * j;
        for (int o = 16; o > 0; o >>= 1) {
          float const ob = __shfl_xor_sync(~0u, best, o);
          int const oa = __shfl_xor_sync(~0u, at, o);
          if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
        }
        if (tid == 0) routed[k] = at;
        if (at % 32 == tid) v[at / 32] = -1e30f;
      }
    }
    __syncthreads();
    marks[1] = now_ns();
    // this CTA's units' segments (routed experts in ascending order, as a body lists them)
    int const lo = kUnits * me / ctas, hi = kUnits * (me + 1) / ctas, per = kI / kUnitRows;
    if (tid == 0) {
      int sorted[kTopk];
      for (int k = 0; k < kTopk; ++k) sorted[k] = routed[k];
      for (int i = 1; i < kTopk; ++i)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; --j) {
          int const t = sorted[j];
          sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
      int n = 0;
      for (int u = lo; u < hi; ++u) {
        uint16_t const *we = p.w + sorted[u / per] * kExpertElems;
        int const row = (u % per) * kUnitRows;
        segment[n++] = we + row * kH;         // gate rows
        segment[n++] = we + (kI + row) * kH;  // up rows
      }
      for (int u = lo; u < hi; ++u) {
        uint16_t const *w2 = p.w + sorted[u / per] * kExpertElems + 2 * kI * kH;
        int const row = (u % per) * kUnitRows;
        segment_expert[n] = sorted[u / per], segment_column[n] = row;
        segment[n++] = p.layout == 1 ? w2 + row * kH : w2 + row;
      }
    }
    __syncthreads();
    int const gate_up_segments = 2 * (hi - lo), stages_a_segment = kUnitChunks / chunks_a_stage;
    int const stages_in_all = 3 * (hi - lo) * stages_a_segment;
    auto issue = [&](int st) {
      if (st < stages_in_all) {
        unsigned char *dst = dyn + (st % kStages) * chunks_a_stage * 16;
        int const seg = st / stages_a_segment, first = (st % stages_a_segment) * chunks_a_stage;
        uint16_t const *base = segment[seg];
        bool const strided = p.layout == 0 && seg >= gate_up_segments;
        for (int i = 0; i < mine_a_stage; ++i)
          mpk::cp_async_16(dst + (i * kThreads + tid) * 16, chunk_of(base, strided, first + i * kThreads + tid));
      }
      mpk::cp_async_commit();
    };
    // copy 1: stage st of this block is the CTA's stage used + st, in slot (used + st) % kStages
    auto issue_tma = [&](int st) {
      if (tid != 0 || st >= stages_in_all) return;
      int const g = used + st, seg = st / stages_a_segment, part = st % stages_a_segment;
      unsigned char *dst = dyn + (g % kStages) * kTmaStage;
      uint64_t *bar = bars + g % kStages;
      mpk::mbarrier_arrive_expect_tx(bar, kTmaStage);
      if (p.layout == 0 && seg >= gate_up_segments) {  // 32 bytes of each of w2's rows
        for (int j = 0; j < kTmaStage / 32 / 256; ++j)
          mpk::tma_load_4d(dst + j * 256 * 32, p.w2_map, mpk::TmaGeometry4{}, segment_column[seg],
                           part * (kTmaStage / 32) + j * 256, segment_expert[seg], 0, bar);
      } else {
        bulk_copy(dst, segment[seg] + part * kTmaStage / 2, kTmaStage, bar);
      }
    };
    if (p.copy) {
      for (int st = 0; st < kStages - 1; ++st) issue_tma(st);
      for (int st = 0; st < stages_in_all; ++st) {
        issue_tma(st + kStages - 1);
        int const g = used + st;
        mpk::mbarrier_wait_parity(bars + g % kStages, (g / kStages) & 1);
        uint4 const *src = reinterpret_cast<uint4 const *>(dyn + (g % kStages) * kTmaStage);
        for (int i = 0; i < mine_a_stage; ++i) {
          uint4 const v = src[i * kThreads + tid];
          streamed += v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();  // the slot is refilled next
      }
      used += stages_in_all;
    } else {
      for (int st = 0; st < kStages - 1; ++st) issue(st);
      for (int st = 0; st < stages_in_all; ++st) {
        issue(st + kStages - 1);
        mpk::cp_async_wait_group<kStages - 1>();
        if (p.sync) __syncthreads();
        uint4 const *src = reinterpret_cast<uint4 const *>(dyn + (st % kStages) * chunks_a_stage * 16);
        for (int i = 0; i < mine_a_stage; ++i) {
          uint4 const v = src[i * kThreads + tid];
          streamed += v.x ^ v.y ^ v.z ^ v.w;
        }
        if (p.sync) __syncthreads();
      }
      mpk::cp_async_wait_all();
    }
    marks[2] = now_ns();
    if (!p.combine) {
      for (int i = tid; i < kH; i += kThreads)
        atomicAdd(p.sums + b * kH + i, static_cast<float>(streamed & 0xff) * 1e-6f);
      __threadfence();
      add_count(count + 2);
      marks[3] = marks[4] = marks[5] = now_ns();
      if (b == p.stamp_block && tid == 0)
        for (int i = 0; i < kStamps; ++i) p.stamps[me * kStamps + i] = marks[i];
      continue;
    }
    // partial
    float *part = p.partial + (static_cast<long long>(b) * ctas + me) * kH;
    for (int i = tid; i < kH; i += kThreads) part[i] = static_cast<float>(streamed & 0xff) * 1e-6f + 0.001f * i;
    __threadfence();
    add_count(count + 1);
    marks[3] = now_ns();
    // combine
    wait_count(count + 1, ctas);
    marks[4] = now_ns();
    if (me < kSlices) {
      int const col = tid % 16, grp = tid / 16;
      float sum = 0.f;
#pragma unroll 4
      for (int c = grp; c < ctas; c += 16)
        sum += p.partial[(static_cast<long long>(b) * ctas + c) * kH + me * 16 + col];
      column_sums[grp][col] = sum;
      __syncthreads();
      if (tid < 16) {
        float total_sum = 0.f;
        for (int r = 0; r < 16; ++r) total_sum += column_sums[r][tid];
        p.out[b * kH + me * 16 + tid] = __float2bfloat16(total_sum);
      }
    }
    __threadfence();
    add_count(count + 2);
    marks[5] = now_ns();
    if (b == p.stamp_block && tid == 0)
      for (int i = 0; i < kStamps; ++i) p.stamps[me * kStamps + i] = marks[i];
  }
  if (acc == 0x12345678u) p.out[0] = __float2bfloat16(1.f);  // keeps the router's loads
  atomicAdd(p.checksum, streamed);
}

// What `checksum` must be after a launch of `blocks` blocks from block `first`: the same sum over every
// 16-byte chunk of the experts each block routes. Whatever the copies and w2's layout, a block streams
// exactly its 8 experts' bytes once.
__global__ void expected_checksum(uint16_t const *w, int first, int blocks, unsigned long long *sum) {
  long long const chunks = kExpertElems / 8, n = blocks * kTopk * chunks;
  unsigned long long mine = 0;
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += gridDim.x * 256LL) {
    int const b = static_cast<int>(i / (kTopk * chunks)), j = static_cast<int>(i / chunks % kTopk);
    int const expert = j * 16 + (first + b) % 16;  // logit_of's set for block first + b
    uint4 const v = reinterpret_cast<uint4 const *>(w + expert * kExpertElems)[i % chunks];
    mine += v.x ^ v.y ^ v.z ^ v.w;
  }
  atomicAdd(sum, mine);
}

using Kernel = void (*)(Params);

static Kernel by_stages(int stages) {
  switch (stages) {
    case 2:
      return moe_block<2>;
    case 3:
      return moe_block<3>;
    case 4:
      return moe_block<4>;
    case 6:
      return moe_block<6>;
    case 8:
      return moe_block<8>;
    default:
      return nullptr;
  }
}

__global__ void fill(uint16_t *p, long long n) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += gridDim.x * 256LL)
    p[i] = static_cast<uint16_t>(0x3c00u + (i * 2654435761u >> 24));
}

int main(int argc, char **argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: moe_ceiling blocks stages stage_kb layout sync router combine copy\n");
    return 2;
  }
  int const blocks = std::atoi(argv[1]), stages = std::atoi(argv[2]), stage_kb = std::atoi(argv[3]);
  int const layout = std::atoi(argv[4]), sync = std::atoi(argv[5]), router = std::atoi(argv[6]);
  int const combine = std::atoi(argv[7]), copy = std::atoi(argv[8]);
  Kernel const k = by_stages(stages);
  if (!k || blocks < 3 || (stage_kb != 16 && stage_kb != 32 && stage_kb != 64) || (layout != 0 && layout != 1) ||
      stages * stage_kb > 200 || (copy && stage_kb * 1024 != kTmaStage) || (sync | router | combine | copy) & ~1) {
    std::fprintf(stderr,
                 "moe_ceiling: unsupported case blocks %d stages %d stage_kb %d layout %d sync %d router %d combine %d"
                 " copy %d\n",
                 blocks, stages, stage_kb, layout, sync, router, combine, copy);
    return 2;
  }
  int sms, major;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (copy && major < 9) {
    std::fprintf(stderr, "moe_ceiling: copy 1 (the TMA unit) needs sm90 or later, this GPU is sm%d\n", major * 10);
    return 2;
  }
  size_t const smem = size_t(stages) * stage_kb * 1024;
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  if (3 * ((kUnits + sms - 1) / sms) > kMaxSegments) {
    std::fprintf(stderr, "moe_ceiling: %d SMs take more than %d segments each\n", sms, kMaxSegments);
    return 2;
  }
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem));
  if (per_sm < 1) {
    std::fprintf(stderr, "moe_ceiling: %zu bytes of shared memory do not fit an SM\n", smem);
    return 2;
  }

  uint16_t *w, *wr;
  float *logits, *partial, *sums;
  __nv_bfloat16 *out;
  unsigned *count;
  unsigned long long *stamps;
  size_t const w_elems = size_t(kE) * kExpertElems, wr_elems = size_t(blocks) * kE * kH;
  CHECK(cudaMalloc(&w, w_elems * 2));
  CHECK(cudaMalloc(&wr, wr_elems * 2));
  fill<<<1024, 256>>>(w, w_elems);
  fill<<<1024, 256>>>(wr, wr_elems);
  CHECK(cudaGetLastError());
  CHECK(cudaMalloc(&logits, size_t(blocks) * kE * sizeof(float)));
  CHECK(cudaMalloc(&partial, size_t(blocks) * sms * kH * sizeof(float)));
  CHECK(cudaMalloc(&sums, size_t(blocks) * kH * sizeof(float)));
  CHECK(cudaMalloc(&out, size_t(blocks) * kH * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&count, size_t(blocks) * 3 * sizeof(unsigned)));
  CHECK(cudaMalloc(&stamps, size_t(sms) * kStamps * sizeof(unsigned long long)));
  mpk::TensorMap *w2_map = nullptr;
  if (copy) {  // w2 of every expert as a tensor (I, H, E, 1), dim 0 contiguous; a box 16 columns x 256 rows
    auto const encode = tensor_map_encoder("moe_ceiling");
    if (!encode) return 1;
    CUtensorMap map;
    cuuint64_t const dims[4] = {kI, kH, kE, 1};
    cuuint64_t const strides[3] = {kI * 2, kExpertElems * 2, kE * kExpertElems * 2};
    cuuint32_t const box[4] = {16, 256, 1, 1}, unit[4] = {1, 1, 1, 1};
    CUresult const made = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, w + 2 * kI * kH, dims, strides, box, unit,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (made != CUDA_SUCCESS) {
      std::fprintf(stderr, "moe_ceiling: cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(made));
      return 1;
    }
    CHECK(cudaMalloc(&w2_map, sizeof(mpk::TensorMap)));
    CHECK(cudaMemcpy(w2_map, &map, sizeof(map), cudaMemcpyHostToDevice));
  }
  unsigned long long *sums_of_chunks;  // [0]: what the launch streamed, [1]: what it should have
  CHECK(cudaMalloc(&sums_of_chunks, 2 * sizeof(unsigned long long)));
  Params p{w,      wr,     logits, partial, sums, out,    count,   stamps, sums_of_chunks,
           w2_map, blocks, 0,      layout,  sync, router, combine, copy,   blocks / 2};

  int run = 0;  // blocks launched so far: each block routes the next set of experts
  auto launch = [&](int n) {
    p.blocks = n;
    p.first = run;
    run += n;
    CHECK(cudaMemsetAsync(count, 0, size_t(n) * 3 * sizeof(unsigned)));
    CHECK(cudaMemsetAsync(sums, 0, size_t(n) * kH * sizeof(float)));
    void *args[] = {&p};
    CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void const *>(k), sms, kThreads, args, smem));
  };
  auto launch_us = [&](int n) { return double(median_launch_us([] {}, [&] { launch(n); })); };  // memsets timed
  double const many = launch_us(blocks), two = launch_us(2);
  // The phases of the middle block of a launch, medians over the CTAs (ns -> us).
  p.stamp_block = blocks / 2;
  // The same launch checks the stream's bytes: every chunk of the routed experts once, none other.
  CHECK(cudaMemset(sums_of_chunks, 0, 2 * sizeof(unsigned long long)));
  int const first = run;
  launch(blocks);
  expected_checksum<<<1024, 256>>>(w, first, blocks, sums_of_chunks + 1);
  CHECK(cudaDeviceSynchronize());
  unsigned long long sums_host[2];
  CHECK(cudaMemcpy(sums_host, sums_of_chunks, sizeof(sums_host), cudaMemcpyDeviceToHost));
  if (sums_host[0] != sums_host[1]) {
    std::fprintf(stderr,
                 "moe_ceiling: the blocks streamed other bytes than their experts' (checksum %llu, expected %llu)\n",
                 sums_host[0], sums_host[1]);
    return 1;
  }
  std::vector<unsigned long long> host(size_t(sms) * kStamps);
  CHECK(cudaMemcpy(host.data(), stamps, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::vector<double> phase[kStamps - 1];
  for (int c = 0; c < sms; ++c)
    for (int i = 0; i + 1 < kStamps; ++i)
      phase[i].push_back((host[c * kStamps + i + 1] - host[c * kStamps + i]) * 1e-3);
  std::printf(
      "launch_n_us %.2f launch_2_us %.2f per_block_us %.2f route_us %.2f stream_us %.2f partial_us %.2f "
      "wait_us %.2f combine_us %.2f sms %d smem_KB %zu\n",
      many, two, (many - two) / (blocks - 2), median(phase[0]), median(phase[1]), median(phase[2]), median(phase[3]),
      median(phase[4]), sms, smem / 1024);
  return 0;
}
