// The speed of light of a split-KV decode on this GPU: how fast can a decode of paged attention be
// without its math (or with a stand-in for it), with only the dependent steps every split-KV body
// has? bench_decode_ceiling.py builds it and compares it with the KV-read floor of issue 11's decodes.
//
// One persistent CTA an SM (256 threads) takes the tasks of `copies` independent layers, as the
// megakernel's workers do: task g goes to slot g % slots_in_all, slots numbered CTA-fastest, and each
// slot runs its tasks in order. A slot is the whole CTA (slots 1) or one half of it (slots 2: two
// tasks at once an SM, each on 128 threads with its own named barrier). A task is (request, kv head,
// split) of a Qwen3-8B layer (8 kv heads of 128, bf16, pages of 64 keys, GQA 4) and does:
//   chain 1:  read the request's first page from the page-table pointer array, then its split's page
//             indices (two dependent loads) into shared memory, as a body reads the meta tensors;
//             chain 2: each row's page index read from the page table (global memory) as its copy
//             is issued; chain 0: none (pages computed);
//   stream:   its keys' K and V rows by cp.async into `stages` stages of `tile` keys (16-byte copies,
//             every thread issuing its share, as the attention body does), each tile consumed by one
//             shared-memory read a thread (no math);
//   bulk 1:   each 256-byte row a bulk copy (cp.async.bulk, sm90 on) by the slot's first warp, a stage's
//             bytes counted on its mbarrier, instead of 16-byte cp.async by every thread; bulk 2: each
//             page of the kv head (64 rows, 16 KB) one tensor copy (cp.async.bulk.tensor from a tensor
//             map of the cache) by one thread;
//   lds 1:    every byte of each tile read back from shared memory once (16-byte loads), as the math's
//             fragment loads do, instead of one word a thread;
//   producers P: warps 0 .. P - 1 only copy (stage after stage, each stage's landing counted on an
//             mbarrier) and the others only read and compute (handing each stage back on another),
//             instead of every warp doing both in turn (one slot of 8 warps only);
//   math_ns:  after each tile, this many ns (per 128 keys, at the SM clock) of waiting in every thread,
//             a stand-in for the math: what the stages keep in flight while the warps compute;
//   merge 1:  a partial of 4 rows x 128 floats with their max and sum written, a fence, one atomicAdd
//             on the (request, kv head) count; the last split copies every split's partial into
//             shared memory in one round, combines them with their weights and writes the 4 output
//             rows (merge 0: each split writes its rows, no count).
// Printed: the launch time of `copies` layers and of 1, the per-layer time (T(n) - T(1)) / (n - 1),
// and the span of one layer in a launch of its own (first task start to last task end, globaltimer).
// Tensor copies are first checked against cp.async of the same rows (a page of each kv head).
//
//   decode_ceiling B S Z slots stages tile chain merge copies math_ns bulk lds producers
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "ceiling_program.cuh"

constexpr int kHkv = 8, kD = 128, kPage = 64, kRows = 4;  // kv heads, head dim, page, q rows a task (GQA 4)
constexpr int kRowBytes = kD * 2;
constexpr int kPartial = kRows * kD + 2 * kRows;  // floats: o, then max and sum of each row

struct Params {
  uint16_t const *k, *v;        // copies x pages x 64 x kHkv x kD
  long long copy_elems;         // elements of one copy's cache
  int const *first_page;        // B: the request's first entry in `pages`
  int const *pages;             // the page table, B x pages a request
  float *partial;               // copies x B x kHkv x Z x kPartial
  unsigned *count;              // copies x B x kHkv
  __nv_bfloat16 *out;           // copies x B x kHkv x kRows x kD
  unsigned long long *stamps;   // slots x 2: start, end (ns)
  int B, S, Z, copies, chain, merge;
  long long math_cycles;        // a tile's stand-in for the math: this many cycles of waiting (0: none)
  int bulk, lds;                // rows as bulk copies on an mbarrier a stage; the whole stage read back
  int producers;                // warps that only copy (the rest only compute), 0: every warp does both
  CUtensorMap maps[16];         // bulk 2: each copy's K and V cache as a tensor (2 copy + 0 or 1)
};

__device__ __forceinline__ unsigned dynamic_smem_size() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

template <int kThreads>
__device__ __forceinline__ void slot_barrier(int slot) {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(kThreads) : "memory");
}

// Bulk copies (sm90 on): one 256-byte row a copy, issued by the slot's first warp, each stage's bytes
// counted on its mbarrier; the copies go through the TMA unit, not the load/store queue the warps'
// shared-memory reads use.
__device__ __forceinline__ unsigned smem_address(void const *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(unsigned long long *bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(bar)) : "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void bulk_row(void *dst, void const *src, unsigned long long *bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_address(dst)),
               "l"(src), "n"(kRowBytes), "r"(smem_address(bar))
               : "memory");
#endif
}

// One page of one kv head (64 rows of 256 bytes, 16 KB) by the TMA unit, from a tensor map of the cache.
__device__ __forceinline__ void tensor_page(void *dst, CUtensorMap const *map, int h, int page,
                                            unsigned long long *bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(0), "r"(h), "r"(0), "r"(page), "r"(smem_address(bar))
      : "memory");
#endif
}

__device__ __forceinline__ void bar_expect(unsigned long long *bar, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stage's earlier reads, before the copies' writes
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void bar_wait(unsigned long long *bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
#endif
}

// Producer / consumer stages (sm80 on): a stage is full when every producer thread's copies into it
// have landed (cp.async.mbarrier.arrive), and empty when every consumer thread has read it.
__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned long long *bar) {
  asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.shared.b64 state, [%0];\n\t}" ::"r"(smem_address(bar))
               : "memory");
}

__device__ __forceinline__ void mbar_arrive_on_copies(unsigned long long *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(smem_address(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
  bar_wait(bar, parity);  // try_wait: the waiting warp is suspended, not spinning against the producers
#else
  unsigned done = 0;
  while (!done)
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done)
                 : "r"(smem_address(bar)), "r"(parity)
                 : "memory");
#endif
}

template <int kStages>
__device__ __forceinline__ void wait_stages() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
}

// One task of one slot: kThreads threads, `smem` its stages, `pg` room for its page indices.
template <int kThreads, int kStages, int kTile>
__device__ void run_task(Params const &p, int g, int slot, int tid, uint8_t *smem, int *pg, unsigned *flag,
                         unsigned long long *bars) {
  int const per_copy = p.B * kHkv * p.Z;
  int const copy = g / per_copy, i = g % per_copy;
  int const b = i % p.B, h = (i / p.B) % kHkv, z = i / (p.B * kHkv);
  int const keys = p.S / p.Z, pages_a_split = (keys + kPage - 1) / kPage, pages_a_request = p.S / kPage;
  int const first_key = z * keys;

  // The page indices of the split's keys.
  int const *table = p.pages + p.first_page[b];  // chain 2: each copy's page index read when it is issued
  if (p.chain == 1) {
    int const first = p.first_page[b];  // the meta read every body starts with
    for (int j = tid; j < pages_a_split; j += kThreads) pg[j] = p.pages[first + first_key / kPage + j];
  } else {
    for (int j = tid; j < pages_a_split; j += kThreads) pg[j] = b * pages_a_request + first_key / kPage + j;
  }
  if (p.bulk && tid < kStages) bar_init(bars + tid);
  slot_barrier<kThreads>(slot);

  uint16_t const *kbase = p.k + copy * p.copy_elems, *vbase = p.v + copy * p.copy_elems;
  int const tiles = keys / kTile;
  constexpr int kChunks = kTile * (kRowBytes / 16);  // 16-byte chunks of one of K or V in a tile
  auto issue = [&](int tile, int stage, int me = -1, int threads = kThreads) {
    if (me < 0) me = tid;
    uint8_t *dst0 = smem + stage * 2 * kTile * kRowBytes;
    if (p.bulk == 2) {  // a tile is whole pages: one tensor copy a page for K and one for V, by one thread
      if (tid == 0) {
        bar_expect(bars + stage, 2 * kTile * kRowBytes);
        for (int j = 0; j < kTile / kPage; ++j) {
          int const page = pg[(tile * kTile) / kPage + j];
          for (int kv = 0; kv < 2; ++kv)
            tensor_page(dst0 + (kv * kTile + j * kPage) * kRowBytes, &p.maps[2 * copy + kv], h, page, bars + stage);
        }
      }
      return;
    }
    if (p.bulk) {
      if (tid >= 32) return;
      if (tid == 0) bar_expect(bars + stage, 2 * kTile * kRowBytes);
      __syncwarp();
      for (int r = tid; r < 2 * kTile; r += 32) {
        int const kv = r / kTile, row = r % kTile, key = first_key + tile * kTile + row;
        int const page = p.chain == 2 ? table[key / kPage] : pg[(key - first_key) / kPage];
        long long const elem = ((static_cast<long long>(page) * kPage + key % kPage) * kHkv + h) * kD;
        bulk_row(dst0 + (kv * kTile + row) * kRowBytes, (kv ? vbase : kbase) + elem, bars + stage);
      }
      return;
    }
    for (int c = me; c < 2 * kChunks; c += threads) {
      int const kv = c / kChunks, rem = c % kChunks, row = rem / (kRowBytes / 16), part = rem % (kRowBytes / 16);
      int const key = first_key + tile * kTile + row;
      int const page = p.chain == 2 ? table[key / kPage] : pg[(key - first_key) / kPage];
      long long const elem = ((static_cast<long long>(page) * kPage + key % kPage) * kHkv + h) * kD + part * 8;
      uint16_t const *src = (kv ? vbase : kbase) + elem;
      unsigned const dst =
          static_cast<unsigned>(__cvta_generic_to_shared(dst0 + (kv * kTile + row) * kRowBytes + part * 16));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
    }
  };
  unsigned acc = 0;
  if (p.producers) {  // the first warps copy every tile, the rest compute: neither waits for the other's work
    int const producers = 32 * p.producers, consumers = kThreads - producers;
    unsigned long long *full = bars, *empty = bars + kStages;
    if (tid < kStages) {
      mbar_init(full + tid, producers);
      mbar_init(empty + tid, consumers);
    }
    slot_barrier<kThreads>(slot);
    for (int t = 0; t < tiles; ++t) {
      int const s = t % kStages;
      if (tid < producers) {
        if (t >= kStages) mbar_wait(empty + s, (t / kStages - 1) & 1);
        issue(t, s, tid, producers);
        mbar_arrive_on_copies(full + s);
      } else {
        mbar_wait(full + s, (t / kStages) & 1);
        uint4 const *stage = reinterpret_cast<uint4 const *>(smem + s * 2 * kTile * kRowBytes);
        if (p.lds) {
#pragma unroll 4
          for (int c = tid - producers; c < 2 * kTile * kRowBytes / 16; c += consumers) {
            uint4 const v = stage[c];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
          }
        } else {
          acc ^= stage[tid - producers].x;
        }
        for (long long const begin = clock64(); clock64() - begin < p.math_cycles;) {
        }
        mbar_arrive(empty + s);
      }
    }
    slot_barrier<kThreads>(slot);
  }
#pragma unroll
  for (int s = 0; s < kStages - 1 && !p.producers; ++s) {
    if (s < tiles) issue(s, s);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int t = 0; t < tiles && !p.producers; ++t) {
    int const next = t + kStages - 1;
    if (next < tiles) issue(next, next % kStages);
    asm volatile("cp.async.commit_group;" ::: "memory");
    if (p.bulk) {
      bar_wait(bars + t % kStages, (t / kStages) & 1);
    } else {
      wait_stages<kStages>();
      slot_barrier<kThreads>(slot);
    }
    uint4 const *stage = reinterpret_cast<uint4 const *>(smem + (t % kStages) * 2 * kTile * kRowBytes);
    if (p.lds) {  // every byte of the stage read once, as the math's fragment loads read it
#pragma unroll 4
      for (int c = tid; c < 2 * kTile * kRowBytes / 16; c += kThreads) {
        uint4 const v = stage[c];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    } else {
      acc ^= stage[tid].x;
    }
    for (long long const begin = clock64(); clock64() - begin < p.math_cycles;) {
    }
    slot_barrier<kThreads>(slot);
  }
  float const value = static_cast<float>(acc & 0xff) * 1e-3f;

  long long const head = (static_cast<long long>(copy) * p.B + b) * kHkv + h;
  __nv_bfloat16 *out = p.out + head * kRows * kD;
  if (!p.merge || p.Z == 1) {
    for (int e = tid; e < kRows * kD; e += kThreads) out[e] = __float2bfloat16(value);
    return;
  }
  float *mine = p.partial + (head * p.Z + z) * kPartial;
  for (int e = tid; e < kPartial; e += kThreads)
    mine[e] = e < kRows * kD ? value : (e < kRows * kD + kRows ? value : 1.f);
  slot_barrier<kThreads>(slot);
  if (tid == 0) {
    __threadfence();
    *flag = atomicAdd(p.count + head, 1u) == static_cast<unsigned>(p.Z - 1);
  }
  slot_barrier<kThreads>(slot);
  if (!*flag) return;
  __threadfence();
  // The merger: every split's partial into this slot's stages in one round of copies, then combined.
  float const *all = p.partial + head * p.Z * kPartial;
  float *got = reinterpret_cast<float *>(smem);
  for (int c = tid; c < p.Z * kPartial / 4; c += kThreads) {
    unsigned const dst = static_cast<unsigned>(__cvta_generic_to_shared(got + 4 * c));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(all + 4 * c) : "memory");
  }
  asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
  slot_barrier<kThreads>(slot);
  for (int e = tid; e < kRows * kD; e += kThreads) {
    int const row = e / kD;
    float m = -1e30f;
    for (int s = 0; s < p.Z; ++s) m = fmaxf(m, got[s * kPartial + kRows * kD + row]);
    float o = 0.f, l = 0.f;
    for (int s = 0; s < p.Z; ++s) {
      float const *q = got + s * kPartial;
      float const w = __expf(q[kRows * kD + row] - m);
      o += w * q[e];
      l += w * q[kRows * kD + kRows + row];
    }
    out[e] = __float2bfloat16(o / l);
  }
  slot_barrier<kThreads>(slot);  // the stages are the next task's
}

template <int kSlots, int kStages, int kTile>
__global__ void __launch_bounds__(256, 1) decode(__grid_constant__ const Params p) {
  constexpr int kThreads = 256 / kSlots;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int pages[kSlots][64];
  __shared__ unsigned flag[kSlots];
  __shared__ __align__(8) unsigned long long bars[kSlots][8];
  int const slot_here = threadIdx.x / kThreads, tid = threadIdx.x % kThreads;
  int const slot = slot_here * gridDim.x + blockIdx.x, slots = kSlots * gridDim.x;
  unsigned long long const start = now_ns();
  int const tasks = p.copies * p.B * kHkv * p.Z;
  uint8_t *mine = smem + slot_here * (dynamic_smem_size() / kSlots);
  for (int g = slot; g < tasks; g += slots)
    run_task<kThreads, kStages, kTile>(p, g, slot_here, tid, mine, pages[slot_here], &flag[slot_here], bars[slot_here]);
  if (tid == 0) {
    p.stamps[2 * slot] = start;
    p.stamps[2 * slot + 1] = now_ns();
  }
}

// The caches' contents: every 16-bit element a hash of its index, so that a row copied from the wrong
// place shows.
__global__ void fill(uint16_t *data, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    data[i] = static_cast<uint16_t>((i * 0x9E3779B1u) >> 7);
}

// Tensor copies checked against cp.async of the same rows: block h copies page (7 h) % pages of kv
// head h of copy 0's K cache both ways into shared memory and counts the words that differ.
__global__ void check_tensor_copies(__grid_constant__ const Params p, int pages, unsigned *mismatches) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) unsigned long long bar;
  int const h = blockIdx.x, page = (7 * h) % pages;
  uint8_t *tma = smem, *rows = smem + kPage * kRowBytes;
  if (threadIdx.x == 0) {
    bar_init(&bar);
    bar_expect(&bar, kPage * kRowBytes);
    tensor_page(tma, &p.maps[0], h, page, &bar);
  }
  for (int c = threadIdx.x; c < kPage * kRowBytes / 16; c += blockDim.x) {
    int const row = c / (kRowBytes / 16), part = c % (kRowBytes / 16);
    uint16_t const *src = p.k + ((static_cast<long long>(page) * kPage + row) * kHkv + h) * kD + part * 8;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_address(rows + c * 16)), "l"(src) : "memory");
  }
  asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  bar_wait(&bar, 0);
  unsigned differ = 0;
  for (int w = threadIdx.x; w < kPage * kRowBytes / 4; w += blockDim.x)
    differ += reinterpret_cast<unsigned const *>(tma)[w] != reinterpret_cast<unsigned const *>(rows)[w];
  atomicAdd(mismatches, differ);
}

using Kernel = void (*)(Params);

template <int kSlots, int kStages>
Kernel by_tile(int tile) {
  return tile == 64 ? decode<kSlots, kStages, 64> : tile == 128 ? decode<kSlots, kStages, 128> : nullptr;
}

template <int kSlots>
Kernel by_stages(int stages, int tile) {
  switch (stages) {
    case 2:
      return by_tile<kSlots, 2>(tile);
    case 3:
      return by_tile<kSlots, 3>(tile);
    case 4:
      return by_tile<kSlots, 4>(tile);
    default:
      return nullptr;
  }
}

int main(int argc, char **argv) {
  if (argc != 14) {
    std::fprintf(stderr,
                 "usage: decode_ceiling B S Z slots stages tile chain merge copies math_ns bulk lds producers\n");
    return 2;
  }
  int const B = std::atoi(argv[1]), S = std::atoi(argv[2]), Z = std::atoi(argv[3]), slots = std::atoi(argv[4]);
  int const stages = std::atoi(argv[5]), tile = std::atoi(argv[6]), chain = std::atoi(argv[7]),
            merge = std::atoi(argv[8]);
  int const copies = std::atoi(argv[9]), math_ns = std::atoi(argv[10]), bulk = std::atoi(argv[11]),
            lds = std::atoi(argv[12]), producers = std::atoi(argv[13]);
  Kernel k = slots == 1 ? by_stages<1>(stages, tile) : slots == 2 ? by_stages<2>(stages, tile) : nullptr;
  int const keys = S / std::max(Z, 1);
  if (!k || Z < 1 || S % kPage || keys % tile || keys < tile || (keys + kPage - 1) / kPage > 64 || copies < 2 ||
      producers < 0 || producers > 4 || (producers && (slots != 1 || bulk)) || bulk < 0 || bulk > 2 ||
      (bulk == 2 && (copies > 8 || tile % kPage))) {
    std::fprintf(stderr,
                 "decode_ceiling: unsupported case B %d S %d Z %d slots %d stages %d tile %d copies %d producers %d"
                 " bulk %d\n",
                 B, S, Z, slots, stages, tile, copies, producers, bulk);
    return 2;
  }
  int sms, major;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (bulk && major < 9) {
    std::fprintf(stderr, "decode_ceiling: bulk copies need sm90 or later, this GPU is sm%d\n", major * 10);
    return 2;
  }
  // A slot's stages, which its merger also takes for the partials.
  size_t const smem =
      size_t(slots) * std::max(size_t(stages) * 2 * tile * kRowBytes, size_t(Z) * kPartial * sizeof(float));
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));

  int const pages_a_request = S / kPage, pages = B * pages_a_request;
  long long const copy_elems = static_cast<long long>(pages) * kPage * kHkv * kD;
  // The page table: a random permutation of the cache's pages (non-contiguous, as a running server's).
  std::vector<int> table(pages), first(B);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  for (int b = 0; b < B; ++b) first[b] = b * pages_a_request;

  uint16_t *kc, *vc;
  int *d_first, *d_pages;
  float *partial;
  unsigned *count;
  __nv_bfloat16 *out;
  unsigned long long *stamps;
  size_t const cache_bytes = size_t(copy_elems) * copies * 2;
  CHECK(cudaMalloc(&kc, cache_bytes));
  CHECK(cudaMalloc(&vc, cache_bytes));
  fill<<<1024, 256>>>(kc, cache_bytes / 2);
  fill<<<1024, 256>>>(vc, cache_bytes / 2);
  CHECK(cudaGetLastError());
  CHECK(cudaMalloc(&d_first, B * sizeof(int)));
  CHECK(cudaMalloc(&d_pages, pages * sizeof(int)));
  CHECK(cudaMemcpy(d_first, first.data(), B * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_pages, table.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
  size_t const heads = size_t(copies) * B * kHkv;
  CHECK(cudaMalloc(&partial, heads * Z * kPartial * sizeof(float)));
  CHECK(cudaMalloc(&count, heads * sizeof(unsigned)));
  CHECK(cudaMalloc(&out, heads * kRows * kD * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&stamps, size_t(2) * slots * sms * sizeof(unsigned long long)));

  int khz;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  long long const math_cycles = static_cast<long long>(math_ns) * tile / 128 * khz / 1000000;  // per 128 keys
  Params p{kc, vc, copy_elems, d_first, d_pages, partial,     count, out, stamps,   B,
           S,  Z,  copies,     chain,   merge,   math_cycles, bulk,  lds, producers};
  // bulk 2: each copy's K and V cache as a 4-d tensor (head dim, kv head, row, page), a box a page of one head.
  CUtensorMap maps[16];
  if (bulk == 2) {
    auto const encode = tensor_map_encoder("decode_ceiling");
    if (!encode) return 1;
    cuuint64_t const dims[4] = {kD, kHkv, kPage, static_cast<cuuint64_t>(pages)};
    cuuint64_t const strides[3] = {kRowBytes, kHkv * kRowBytes, static_cast<cuuint64_t>(kPage) * kHkv * kRowBytes};
    cuuint32_t const box[4] = {kD, 1, kPage, 1}, unit[4] = {1, 1, 1, 1};
    for (int i = 0; i < 2 * copies; ++i) {
      CUresult const made =
          encode(&maps[i], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (i % 2 ? vc : kc) + (i / 2) * copy_elems, dims, strides,
                 box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (made != CUDA_SUCCESS) {
        std::fprintf(stderr, "decode_ceiling: cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(made));
        return 1;
      }
      p.maps[i] = maps[i];
    }
    unsigned *mismatches, differ = 0;
    CHECK(cudaMalloc(&mismatches, sizeof(unsigned)));
    CHECK(cudaMemset(mismatches, 0, sizeof(unsigned)));
    CHECK(
        cudaFuncSetAttribute(check_tensor_copies, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * kPage * kRowBytes));
    check_tensor_copies<<<kHkv, 256, 2 * kPage * kRowBytes>>>(p, pages, mismatches);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&differ, mismatches, sizeof(unsigned), cudaMemcpyDeviceToHost));
    if (differ) {
      std::fprintf(stderr, "decode_ceiling: tensor copies differ from cp.async of the same rows in %u words\n", differ);
      return 1;
    }
  }
  auto launch_us = [&](int n) {
    p.copies = n;
    return median_launch_us([&] { CHECK(cudaMemsetAsync(count, 0, heads * sizeof(unsigned))); },
                            [&] { k<<<sms, 256, smem>>>(p); });
  };
  float const many = launch_us(copies), one = launch_us(1);
  // The span of one layer: its tasks' first start to last end, median of 20 launches of one alone.
  std::vector<double> spans;
  std::vector<unsigned long long> host(size_t(2) * slots * sms);
  for (int rep = 0; rep < 20; ++rep) {
    p.k = kc + (rep % copies) * copy_elems;  // each launch another copy's cache, so that none is in L2
    p.v = vc + (rep % copies) * copy_elems;
    if (bulk == 2) p.maps[0] = maps[2 * (rep % copies)], p.maps[1] = maps[2 * (rep % copies) + 1];
    CHECK(cudaMemset(count, 0, heads * sizeof(unsigned)));
    CHECK(cudaMemset(stamps, 0, host.size() * sizeof(unsigned long long)));
    k<<<sms, 256, smem>>>(p);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(host.data(), stamps, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    unsigned long long lo = ~0ull, hi = 0;
    int const per_copy = B * kHkv * Z;
    for (int s = 0; s < slots * sms && s < per_copy; ++s) {
      lo = std::min(lo, host[2 * s]);
      hi = std::max(hi, host[2 * s + 1]);
    }
    spans.push_back((hi - lo) * 1e-3);
  }
  std::printf("launch_n_us %.2f launch_1_us %.2f per_layer_us %.2f span_us %.2f smem_KB %zu sms %d\n", many, one,
              (many - one) / (copies - 1), median(spans), smem / 1024, sms);
  return 0;
}
