// Paged attention, Qwen3 style (declared in mpk_runtime/tasks/paged_attention.py; the math is
// reference/paged_attention/pytorch_reference.py). Task (x, y, z): batch slot x, kv head y, part z
// of Z. Its rows are (new token i, q head g of kv head y), token-major, in m-tiles of 16 rows.
//
// Grid y = H_KV / 2: a task takes kv heads 2y and 2y + 1, one on each half of the warps, each half
// with its own shared memory and named barrier. Two independent streams per SM keep copies in flight
// while the other half does its math, merges or waits (the steps below serialize within a stream).
//
// Z > 1: a request with at most kKvSplitMaxTokens new tokens splits its keys in Z chunks (flash
// decoding: each task writes a partial result and its log-sum-exp to the layer's workspace; the
// last of the Z to finish, found with an atomic counter, merges them); a longer request splits its
// new tokens in Z blocks. The Python spec computes the same split (tasks/paged_attention.py).
//
// 1. Append: the new keys (RMSNorm, then rotary embedding, in fp32) and values this task owns (the
//    positions of its key chunk, or its token block) go into the paged cache. A new key of another
//    task's token block is computed again from the input where it is needed, never read back from
//    a cache slot another task writes.
// 2. Q: the warps of an m-tile normalize and rotate its rows into shared memory (sharing the rows
//    out), then each holds them as mma A fragments.
// 3. Keys stream through shared memory in tiles of 16 keys per warp (cp.async, kStages deep, row by
//    row through the page table, so any page size works). A warp takes 16-key chunks of a tile, one
//    or kWideStep at a time: S = Q K^T (mma m16n8k16, fp32), online softmax in fp32 (exp2,
//    lane-partial sums), O += P V (mma, P rounded to T). Warps that share an m-tile (decode: all of
//    them) split each tile's chunks and merge their (m, l, O) through shared memory at the end.
// Tiles of history keys are requested before the append and the Q preparation run, so that their
// latency overlaps that work; tiles with new keys after a barrier that publishes the append. On sm90
// a tile of whole boxes of history, or of keys the task appended itself, comes by TMA instead
// (boxes of R rows of a page, from tensor maps of the caches, issued by warp 0 and counted on the
// stage's mbarrier): the copies then run while the warps compute, where cp.async issues stall the
// warps that do the math.
//
// Fragments (mma.cuh has the PTX layout; lane = 4 g + t):
// - S = Q K^T permutes the head dimension: one 16-byte load (chunk qk_chunk(c, t), d 8 qk_chunk ..
//   + 7) feeds two k-steps, and Q and K use the same permutation.
// - O += P V: B = V (k: keys, n: d) wants two keys' values at one d in a register: lane g loads 16
//   bytes (8 d) of each key it needs and pairs two keys' halves with a byte permute. So column n of
//   n-tile j is d = 64 (j / 8) + 8 n + j % 8, and O reaches global memory through shared memory.
// - Shared tiles are blocks of 64 elements a row with 16-byte chunks XOR-swizzled (tile_offset),
//   the layout of a TMA copy with the 128-byte swizzle; both read patterns are free of bank conflicts.
#pragma once
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "primitives/block.cuh"
#include "primitives/cp_async.cuh"
#include "primitives/loads.cuh"
#include "primitives/mma.cuh"
#include "primitives/tma.cuh"
#include "primitives/vec.cuh"
#include "primitives/warp.cuh"
#include "runtime/task_api.cuh"

namespace mpk {
namespace tasks {
namespace attn {

constexpr int kKvSplitMaxTokens = 16;  // mpk_runtime/tasks/paged_attention.py: KV_SPLIT_MAX_TOKENS
constexpr int kWorkspacePad = 4;       // floats after each partial row (its log-sum-exp)
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kModeAll = 0, kModeKeys = 1, kModeTokens = 2;
constexpr int kRowBatch = 4;  // rows a warp normalizes at a time (their loads in flight together)
// The same for keys computed from the input into a tile: two rounds of loads a 128-key tile at 8
// warps instead of four. 8 rows fit in the registers because norm_rope_rows holds them as loaded
// (as floats they spilled). A 4096-token prefill on an H200: 2.2 ms with 4 rows held as floats,
// 1.9 ms with 8 held as loaded (the two changes were not timed apart).
constexpr int kKeyRowBatch = 8;
// 16-key chunks a warp takes under one online-softmax update where it has that many of a tile (a
// prefill's warps: their m-tiles share few warps each). On an H200 a 4096-token prefill took 3% less
// time with 2 than with 1, and 3-5% less with 4, but 4 spilled registers in three of the four sm90
// variants built (all but two kv heads a task) and made the model's decode 2.4% slower
// (PERFORMANCE.md, twenty-ninth session).
constexpr int kWideStep = 2;
// Runtime::mark's phases (tasks/paged_attention.py names them): each pass marks the first four.
constexpr int kPhaseRequested = 0, kPhaseQ = 1, kPhaseKeys = 2, kPhaseRows = 3, kPhaseCounted = 4;

// The largest power of two <= n (n >= 1).
__host__ __device__ constexpr int floor_pow2(int n) { return n < 2 ? 1 : 2 * floor_pow2(n / 2); }
static_assert(floor_pow2(1) == 1 && floor_pow2(5) == 4 && floor_pow2(16) == 16, "floor_pow2");

// W warps stream one (request, kv head): all of the worker's, or half of them in a task of two kv
// heads. A tile is 16 keys a warp; the stages keep about 64 KB of keys and values in flight per SM
// (a half's two stages are half of that, and the two halves of the worker stream at once).
template <int W>
__host__ __device__ constexpr int stages_of() {
  return W < kWorkerWarps || W >= 8 ? 2 : 3;
}

template <typename T, int D, int W>
struct Smem {
  static constexpr int kTileKeys = 16 * W, kStages = stages_of<W>();
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(T));
  static constexpr int kQBytes = W * 16 * kRowBytes;  // q rows of up to W m-tiles
  static constexpr int kTileBytes = kTileKeys * kRowBytes;  // K or V of one stage
  // The merge scratch: per warp 16 rows of O (row stride D + 4 floats: the PV fragment stores hit 4
  // banks where D would put them all in one; still 16-byte rows), then m and l of the 16 rows.
  static constexpr int kScratchRow = D + 4;
  static constexpr int kScratchWarp = 16 * kScratchRow + 32;
  static constexpr int kScratchBytes = W * kScratchWarp * 4;
  static constexpr int kKvBytes = kStages * 2 * kTileBytes > kScratchBytes ? kStages * 2 * kTileBytes : kScratchBytes;
  static constexpr int kFlag = kQBytes + kKvBytes;  // the "last split" flag, then an mbarrier per stage
  static constexpr int kBarriers = kFlag + 16;
  // A multiple of 1024, so that a second stream's tiles are 1024-byte aligned as well (tile_offset).
  static constexpr int kBytes = (kBarriers + 8 * kStages + 1023) / 1024 * 1024;
};
// Dynamic shared memory is 128-byte aligned; the tiles need 1024 (tile_offset): the body starts at
// the next multiple, which costs up to this much more.
constexpr int kSmemAlign = 1024, kSmemSlack = kSmemAlign - 128;

// Byte offset of 16-byte chunk `chunk` (of D / 8) of row `row` in a shared tile of R rows (q rows,
// keys or values): D / 64 blocks of R rows of 64 elements (128 bytes), a row's chunks XOR-ed with its
// low three bits. This is what a TMA copy with the 128-byte swizzle writes for a box of 64 elements
// into a 1024-byte aligned block (the body aligns its shared memory to 1024 bytes, and R is a
// multiple of 8), so tensor copies and cp.async fill the same tiles; the fragment reads below are
// free of bank conflicts in it.
template <int R>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk >> 3) * (R * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}
// The chunk lane t loads for k-step pair c of S = Q K^T (of q rows and keys alike): lanes t of rows g
// and g + 1 (a quarter warp) then read eight distinct 16-byte bank groups.
__device__ __forceinline__ int qk_chunk(int c, int t) { return 8 * (c >> 1) + 2 * t + (c & 1); }

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  union {
    uint32_t u;
    T v[2];
  } r;
  r.v[0] = from_float<T>(lo);
  r.v[1] = from_float<T>(hi);
  return r.u;
}

__device__ __forceinline__ uint32_t word(uint4 v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

// The low (high = false) or high halves of a and b as one register, a's in the low 16 bits (a PRMT).
__device__ __forceinline__ uint32_t halves(uint32_t a, uint32_t b, bool high) {
  return high ? (a >> 16) | (b & 0xffff0000u) : (a & 0xffffu) | (b << 16);
}

// E consecutive elements of T (E * sizeof(T) = 4 or 8 bytes, aligned) as floats, and back.
template <typename T, int E>
struct Raw {
  using Word = std::conditional_t<E * sizeof(T) == 8, uint2, uint32_t>;
  union {
    Word w;
    T v[E];
  };
};
template <typename T, int E>
__device__ __forceinline__ void load_elems(T const *p, float (&f)[E]) {
  Raw<T, E> r;
  r.w = *reinterpret_cast<typename Raw<T, E>::Word const *>(p);
#pragma unroll
  for (int e = 0; e < E; ++e) f[e] = to_float(r.v[e]);
}
template <typename T, int E>
__device__ __forceinline__ void store_elems(T *p, float const (&f)[E]) {
  Raw<T, E> r;
#pragma unroll
  for (int e = 0; e < E; ++e) r.v[e] = from_float<T>(f[e]);
  *reinterpret_cast<typename Raw<T, E>::Word *>(p) = r.w;
}

// One warp, up to R rows of one head each (lane: D / 32 consecutive elements): out = rotate_half(
// rmsnorm(src) * weight) at the row's position, in fp32, handed to put(r, lane_values). Row r is
// skipped when src(r) is null. All rows' loads are issued before any is used.
template <typename T, int D, int R, typename Src, typename Pos, typename Put>
__device__ __forceinline__ void norm_rope_rows(Src src, Pos pos, Put put, T const *weight, T const *cos_tab,
                                               T const *sin_tab, float eps, int lane) {
  constexpr int E = D / 32;
  using Word = typename Raw<T, E>::Word;
  Raw<T, E> x[R], c[R], s[R];  // held as loaded (half the registers of floats) until used
  float w[E];
  load_elems<T, E>(weight + lane * E, w);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    T const *p = src(r);
    if (p != nullptr) {
      size_t const at = static_cast<size_t>(pos(r)) * D + lane * E;
      x[r].w = *reinterpret_cast<Word const *>(p + lane * E);
      c[r].w = *reinterpret_cast<Word const *>(cos_tab + at);
      s[r].w = *reinterpret_cast<Word const *>(sin_tab + at);
    } else {
      x[r].w = c[r].w = s[r].w = Word{};
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) ss += to_float(x[r].v[e]) * to_float(x[r].v[e]);
    float const scale = rsqrtf(warp_sum(ss) / D + eps);
    float out[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float const v = to_float(x[r].v[e]) * scale * w[e];
      float const partner = __shfl_xor_sync(0xffffffffu, v, 16);  // d +- D/2 lives 16 lanes away
      out[e] = v * to_float(c[r].v[e]) + (lane < 16 ? -partner : partner) * to_float(s[r].v[e]);
    }
    if (src(r) != nullptr) put(r, out);
  }
}

// What one task does, from its grid index and the iteration's meta tensors (the Python spec's
// `splits` computes the same).
struct Plan {
  int q0, qlen, step, kv_len, page_size;
  int const *pages;
  int mode;
  int kb, ke;    // keys read: positions [kb, ke), before the causal limit of each row
  int t0, t1;    // tokens whose rows this task computes
  int w0, w1;    // tokens whose key and value this task appends
  // Key positions computed from the input, new keys not read back from the cache: [step, in1), or
  // none (in0 = in1 = kv_len, or step). Keys before in0 are history or appended by this task.
  int in0, in1;
};

// The splits of one (request, kv head) count themselves done on a 64-bit word of the layer's
// workspace: launch id (32 bits) | iteration (16) | count (16). A word of another tag, or with a
// full count, is stale (an earlier iteration or launch, or the zeroed workspace). Tags grow with
// the launch and the iteration, so each split's atomicMax at its start turns a stale word into
// "this tag, count 0" and leaves a current one as it is: when the splits finish, together, their
// counts are one atomicAdd each.
__device__ __forceinline__ unsigned long long split_count_tag(Runtime const &rt) {
  return (static_cast<unsigned long long>(rt.launch_id) << 32) |
         (static_cast<unsigned long long>(rt.iteration & 0xffffu) << 16);
}

template <int Z>
__device__ __forceinline__ Plan plan_of(TaskDesc const &task, Runtime const &rt) {
  Plan p;
  int const x = task.grid_idx[0], z = task.grid_idx[2];
  p.q0 = rt.meta.qo_indptr[x];
  p.qlen = rt.meta.qo_indptr[x + 1] - p.q0;
  int const first_page = rt.meta.paged_kv_indptr[x];
  int const num_pages = rt.meta.paged_kv_indptr[x + 1] - first_page;
  p.page_size = rt.batch.page_size;
  p.kv_len = (num_pages - 1) * p.page_size + rt.meta.paged_kv_last_page_len[x];
  p.step = p.kv_len - p.qlen;
  p.pages = rt.meta.paged_kv_indices + first_page;
  p.mode = Z == 1 ? kModeAll : (p.qlen <= kKvSplitMaxTokens ? kModeKeys : kModeTokens);
  p.kb = 0, p.ke = p.kv_len, p.t0 = 0, p.t1 = p.qlen, p.w0 = 0, p.w1 = p.qlen, p.in0 = p.in1 = p.kv_len;
  if (p.mode == kModeKeys) {
    int const chunk = ((p.kv_len + Z - 1) / Z + 15) / 16 * 16;
    p.kb = min(p.kv_len, z * chunk);
    p.ke = min(p.kv_len, (z + 1) * chunk);
    p.w0 = max(p.kb - p.step, 0);
    p.w1 = max(p.ke - p.step, 0);
  } else if (p.mode == kModeTokens) {
    int const block = (p.qlen + Z - 1) / Z;
    p.t0 = p.w0 = min(p.qlen, z * block);
    p.t1 = p.w1 = min(p.qlen, (z + 1) * block);
    p.ke = p.step + p.t1;
    p.in0 = p.step;
    p.in1 = p.step + p.t0;
  } else if (p.qlen <= kKvSplitMaxTokens) {
    // A decode (or a short chunk) reads its few new keys from the input, computed as the append
    // computes them, so that no tile waits for the append: all of them go out at the start.
    p.in0 = p.step;
    p.in1 = p.kv_len;
  }
  return p;
}

// What one (request, kv head) stream does: the whole task (W = kWorkerWarps), or one half of a task
// of two kv heads (W = kWorkerWarps / 2). y: the kv head; head_in_box: its place in the task's
// output boxes; tid: the thread within the W warps; smem: their own shared memory; barrier: the half's
// named barrier (the other half runs on its own), or __syncthreads when the stream has every warp.
template <typename T, int D, int G, int H_KV, int Z, int W, int R>
__device__ __forceinline__ void stream(TaskDesc const &task, Runtime const &rt, int y, int head_in_box, int tid,
                                       int barrier, unsigned char *smem) {
  constexpr int H = G * H_KV, ROW = (H + 2 * H_KV) * D, OUT_STRIDE = H * D, SLOT = H_KV * D;
  constexpr int E = D / 32, NT = D / 8, KC = D / 8;  // elements per lane; PV n-tiles; 16-byte chunks per row
  using S = Smem<T, D, W>;
  constexpr int kTileKeys = S::kTileKeys, kStages = S::kStages, kThreads = W * kWarpSize;
  auto sync = [barrier] {
    if constexpr (W == kWorkerWarps)
      __syncthreads();
    else
      named_barrier_sync(barrier, kThreads);
  };
  constexpr float kScale = (D == 64 ? 0.125f : 0.08838834764831845f) * kLog2e;  // log2(e) / sqrt(D)
  // A half's stream (two kv heads a task) keeps one chunk a step and compiles no wide one: with wide
  // steps compiled in, its decode at B 32 x 4096 (which never takes one) measured 6% slower once on
  // an H200, a single sample within the spread of later calls, not confirmed either way.
  constexpr int kWide = W == kWorkerWarps ? kWideStep : 1;

  Plan const p = plan_of<Z>(task, rt);
  if (p.qlen <= 0 || p.t0 >= p.t1) return;
  int const z = task.grid_idx[2], x = task.grid_idx[0];
  if (Z > 1 && p.mode == kModeKeys && tid == 0)  // the split count's word made current now, off the end's chain
    atomicMax(reinterpret_cast<unsigned long long *>(task.input<float>(5)) + x * H_KV + y, split_count_tag(rt));
  int const warp = tid / kWarpSize, lane = tid % kWarpSize, g = lane / 4, t = lane % 4;
  T const *in = task.input<T const>(0);
  T const *q_norm = task.input<T const>(1);
  T const *k_norm = task.input<T const>(2);
  T const *cos_tab = task.input<T const>(3);
  T const *sin_tab = task.input<T const>(4);
  T *k_cache = task.output<T>(0) + head_in_box * D;  // the boxes start at the task's first kv head
  T *v_cache = task.output<T>(1) + head_in_box * D;
  T *out = task.output<T>(2) + head_in_box * G * D;
  float const eps = task.scalar_f(0);
  unsigned char *q_smem = smem;  // one m-tile of q rows per m-tile in flight
  unsigned char *kv_smem = smem + S::kQBytes;
  float *scratch = reinterpret_cast<float *>(kv_smem);
  int *last_flag = reinterpret_cast<int *>(smem + S::kFlag);
  // sm90: tiles of history keys come by TMA, a box of R rows of one page a lane of warp 0, counted
  // on the stage's mbarrier (tensor_maps in tasks/paged_attention.py makes the maps).
  constexpr bool kTma = kTargetSm >= 90 && R > 0;
  constexpr int kBoxes = R > 0 ? kTileKeys / R : 1;  // a tile's runs of R rows, one a lane (K and V, D / 64 boxes each)
  uint64_t *bars = reinterpret_cast<uint64_t *>(smem + S::kBarriers);
  // Whether any tile of the task can come by TMA (by_tma below; the last pass's keys reach furthest):
  // a task without one pays for no barrier and no fence (a decode's short split, a prefill's first block).
  // A TMA tile holds history, or new keys this task appended itself (published before the tile goes
  // out: the append's proxy fence, then a barrier); never keys computed from the input, which the
  // threads write into the tile: TMA tiles end at in0 (Plan).
  bool uses_tma = false;
  if constexpr (kTma) uses_tma = p.kb % R == 0 && p.kb + kTileKeys <= min(p.ke, p.in0);

  auto cache_row = [&](T *cache, int pos) {
    int const page = p.pages[pos / p.page_size];
    return cache + (static_cast<int64_t>(page) * p.page_size + pos % p.page_size) * SLOT;
  };
  auto in_row = [&](int token, int col_head) { return in + static_cast<int64_t>(p.q0 + token) * ROW + col_head * D; };

  int const rows = (p.t1 - p.t0) * G;
  int const mtiles = (rows + 15) / 16;
  int mw = 1;  // m-tiles at a time: a power of two; the warps of one m-tile split its keys
  while (mw * 2 <= mtiles && mw * 2 <= W) mw *= 2;
  int const ks_count = W / mw, my_m = warp / ks_count, my_ks = warp % ks_count;
  bool const empty_keys = p.kb >= p.ke;

  for (int pass = 0; pass < mtiles && !empty_keys; pass += mw) {
    int const pass_rows_end = min(rows, (pass + mw) * 16);
    int const ke = min(p.ke, p.step + p.t0 + (pass_rows_end - 1) / G + 1);  // causal end of the pass
    int const num_tiles = ke > p.kb ? (ke - p.kb + kTileKeys - 1) / kTileKeys : 0;

    // Each pass starts its stages' mbarriers at phase 0 (and invalidates them at its end), so that
    // tile i waits for the parity of its use of its stage, (i / kStages) & 1: a register of phases
    // made the math loop spill (ptxas -v).
    // Every wait of the pass before is behind this thread's syncs; warp 0 issues the copies, and its
    // __syncwarp publishes the init to them.
    if (uses_tma && tid == 0)
      for (int st = 0; st < kStages; ++st) mbarrier_init(&bars[st], 1);
    // Whether tile i comes by TMA: whole boxes (its first key on a box boundary), none from the input
    // (in0), none past the pass's keys (the zero-filled rows of cp.async keep the masked keys'
    // values finite). The tiles that do are the pass's first ones, so a buffer cp.async wrote is
    // never written by a TMA later in the pass. A tile with appended keys is never one of the early
    // ones (early_end below), so it goes out after the append's barrier.
    auto by_tma = [&](int i) {
      if constexpr (kTma) return uses_tma && i < num_tiles && p.kb + (i + 1) * kTileKeys <= min(ke, p.in0);
      return false;
    };
    // Requests one stage: tile i of the pass into buffer i % kStages (one commit group, maybe empty).
    auto issue = [&](int i) {
      int const k0 = p.kb + i * kTileKeys;
      unsigned char *ks = kv_smem + (i % kStages) * 2 * S::kTileBytes, *vs = ks + S::kTileBytes;
      if (by_tma(i)) {
        if (warp == 0) {
          uint64_t *bar = &bars[i % kStages];
          if (lane == 0) mbarrier_arrive_expect_tx(bar, 2 * S::kTileBytes);
          __syncwarp();
          if (lane < kBoxes) {
            // Shared memory other tasks and the pass before wrote, and history other tasks wrote
            // (acquired at this task's start), before this lane's async-proxy copies: once a pass,
            // before its first tile (a tile's arrival and fence took the issuing warp 0.83 us or more
            // on an H200, the fence's share not timed apart). The
            // buffers' reads by the math come before their next copies through the syncs, as a
            // consumer's release does in a pipeline of mbarriers; no tile of the pass after a TMA
            // tile is written by the threads.
            if (i == 0) fence_proxy_async();
            int const pos = k0 + lane * R, page = p.pages[pos / p.page_size], row = pos % p.page_size;
            // Made here, not before the loop: nothing of it stays live through the math (registers).
            TensorMap const *maps = task.input<TensorMap const>(Z > 1 ? 6 : 5);  // K's, then V's
            auto geometry = [&](T const *cache) {  // what the host emulator copies from (dead code here)
              constexpr long long kElemBytes = sizeof(T);
              return TmaGeometry4{cache - y * D,  // the cache from kv head 0, as its map
                                  static_cast<int>(kElemBytes),
                                  {D, H_KV, p.page_size, rt.batch.max_num_pages},
                                  {D * kElemBytes, SLOT * kElemBytes, p.page_size * SLOT * kElemBytes},
                                  {64, 1, R, 1},
                                  true};
            };
#pragma unroll
            for (int h = 0; h < D / 64; ++h) {
              int const at = h * kTileKeys * 128 + lane * R * 128;  // tile_offset's block h, rows lane R ..
              tma_load_4d(ks + at, &maps[0], geometry(k_cache), 64 * h, y, row, page, bar);
              tma_load_4d(vs + at, &maps[1], geometry(v_cache), 64 * h, y, row, page, bar);
            }
          }
        }
      } else if (i < num_tiles) {
        // Thread: 16 bytes (chunk c) of every kRowStride-th row; the rows' page lookups go out together.
        constexpr int kRowStride = kThreads / KC;
        int const c = tid % KC;
#pragma unroll
        for (int r = tid / KC; r < kTileKeys; r += kRowStride) {
          int const pos = k0 + r;
          bool const valid = pos < ke, from_input = valid && pos >= p.in0 && pos < p.in1;  // those rows: below
          int64_t offset = 0;
          if (valid) offset = cache_row(k_cache, pos) - k_cache + c * 8;
          if (!from_input) {
            cp_async_16_zfill(ks + tile_offset<kTileKeys>(r, c), k_cache + offset, valid);
            cp_async_16_zfill(vs + tile_offset<kTileKeys>(r, c), v_cache + offset, valid);
          }
        }
      }
      int const lo = max(k0, p.in0), hi = min(min(k0 + kTileKeys, ke), p.in1);
      // Keys computed from the input [lo, hi): a value is its input row as it is (the append stores it
      // unchanged), copied like the cache's rows; a load and a store by the threads waited for it
      // (7% of a 4096-token prefill on an H200).
#pragma unroll 1
      for (int r = lo - k0 + tid / KC; r < hi - k0; r += kThreads / KC)
        cp_async_16(vs + tile_offset<kTileKeys>(r, tid % KC), in_row(k0 + r - p.step, H + H_KV + y) + tid % KC * 8);
      cp_async_commit();
      int const kw = (warp + W / 2) % W;  // not warp 0 first: it prepares q rows
      for (int base = lo + kw * kKeyRowBatch; base < hi; base += W * kKeyRowBatch) {
        norm_rope_rows<T, D, kKeyRowBatch>(
            [&](int r) { return base + r < hi ? in_row(base + r - p.step, H + y) : nullptr; },
            [&](int r) { return base + r; },
            [&](int r, float const(&v)[E]) {
              int const row = base + r - k0, d0 = lane * E;
              store_elems<T, E>(reinterpret_cast<T *>(ks + tile_offset<kTileKeys>(row, d0 / 8)) + d0 % 8, v);
            },
            k_norm, cos_tab, sin_tab, eps, lane);
      }
    };

    // Tiles whose keys are all history or computed from the input go out before the append and Q
    // work; a tile with keys read back from the append's cache slots after the barrier.
    int issued = 0;
    int const early_end = p.in1 > p.in0 ? max(p.step, p.in1) : p.step;
    while (issued < kStages && issued < num_tiles && min(p.kb + (issued + 1) * kTileKeys, ke) <= early_end)
      issue(issued++);
    rt.mark(kPhaseRequested);

    if (pass == 0) {  // 1. append this task's new keys and values, last warps first (the first prepare q rows)
      int const aw = W - 1 - warp;
      for (int base = p.w0 + aw * kRowBatch; base < p.w1; base += W * kRowBatch) {
        float v[kRowBatch][E];  // the values' loads go out with the keys'
        int64_t slot[kRowBatch] = {};  // and so do the slots' page reads (at the store, the store waited for one)
#pragma unroll
        for (int r = 0; r < kRowBatch; ++r)
          if (base + r < p.w1) {
            load_elems<T, E>(in_row(base + r, H + H_KV + y) + lane * E, v[r]);
            slot[r] = cache_row(k_cache, p.step + base + r) - k_cache + lane * E;
          }
        norm_rope_rows<T, D, kRowBatch>([&](int r) { return base + r < p.w1 ? in_row(base + r, H + y) : nullptr; },
                                        [&](int r) { return p.step + base + r; },
                                        [&](int r, float const(&k)[E]) { store_elems<T, E>(k_cache + slot[r], k); },
                                        k_norm, cos_tab, sin_tab, eps, lane);
#pragma unroll
        for (int r = 0; r < kRowBatch; ++r)
          if (base + r < p.w1) store_elems<T, E>(v_cache + slot[r], v[r]);
        // The appended rows before a TMA tile reads them back (by_tma): the writer's proxy fence, then
        // the barrier after the q rows.
        if (uses_tma) fence_proxy_async();
      }
    }

    // 2. the q rows of each m-tile, normalized and rotated, into shared memory (the warps of an
    // m-tile share the work: row r goes to warp r % ks_count of them), then A fragments.
    int const mtile = pass + my_m;
    bool const active = my_m < mw && mtile < mtiles;
    unsigned char *q_tile = q_smem + my_m * 16 * S::kRowBytes;
    if (active) {
      int const mine = (16 + ks_count - 1 - my_ks) / ks_count;  // rows my_ks, my_ks + ks_count, ... of 16
      for (int b = 0; b < mine; b += kRowBatch) {
        auto row_of = [&](int r) { return my_ks + (b + r) * ks_count; };  // row within the m-tile
        norm_rope_rows<T, D, kRowBatch>(
            [&](int r) {
              int const row = mtile * 16 + row_of(r);
              return b + r < mine && row < rows ? in_row(p.t0 + row / G, y * G + row % G) : nullptr;
            },
            [&](int r) { return p.step + p.t0 + (mtile * 16 + row_of(r)) / G; },
            [&](int r, float const(&v)[E]) {
              int const row = row_of(r), d0 = lane * E;
              store_elems<T, E>(reinterpret_cast<T *>(q_tile + tile_offset<16>(row, d0 / 8)) + d0 % 8, v);
            },
            q_norm, cos_tab, sin_tab, eps, lane);
      }
      for (int r = my_ks; r < 16; r += ks_count)  // rows past the task's: zeros
        if (mtile * 16 + r >= rows && lane < KC) st_16(q_tile + tile_offset<16>(r, lane), uint4{});
    }
    sync();  // the q rows, and the append for every thread's cp.async
    rt.mark(kPhaseQ);
    uint32_t qa[D / 16][4];
    if (active) {
#pragma unroll
      for (int c = 0; c < D / 32; ++c) {
        uint4 const lo = ld_16(q_tile + tile_offset<16>(g, qk_chunk(c, t)));
        uint4 const hi = ld_16(q_tile + tile_offset<16>(g + 8, qk_chunk(c, t)));
        qa[2 * c][0] = lo.x, qa[2 * c][1] = hi.x, qa[2 * c][2] = lo.y, qa[2 * c][3] = hi.y;
        qa[2 * c + 1][0] = lo.z, qa[2 * c + 1][1] = hi.z, qa[2 * c + 1][2] = lo.w, qa[2 * c + 1][3] = hi.w;
      }
    }
    while (issued < kStages) issue(issued++);

    // 3. stream the tiles
    float o[NT][4], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    int pos_row[2];  // positions of this lane's rows g and g + 8
    for (int h = 0; h < 2; ++h) pos_row[h] = p.step + p.t0 + (mtile * 16 + g + 8 * h) / G;
    int const pos_max = p.step + p.t0 + min(mtile * 16 + 15, rows - 1) / G;

    for (int i = 0; i < num_tiles; ++i) {
      if (by_tma(i)) mbarrier_wait_parity(&bars[i % kStages], (i / kStages) & 1);
      cp_async_wait_group<kStages - 1>();
      sync();
      unsigned char const *ks = kv_smem + (i % kStages) * 2 * S::kTileBytes, *vs = ks + S::kTileBytes;
      // This warp's chunks of the tile are my_ks, my_ks + ks_count, ... A step takes NCH of them under
      // one online-softmax update (one max, one rescale of O), with NCH * 2 independent chains of
      // score mma. A warp with at least kWide chunks of a tile (a prefill's: ks_count <= 4) takes
      // them kWide at a time; a decode's warp (one chunk a tile) one at a time.
      auto step = [&](auto width, int chunk) {
        constexpr int NCH = decltype(width)::value;
        int kr[NCH], key0[NCH];
#pragma unroll
        for (int q = 0; q < NCH; ++q) kr[q] = (chunk + q * ks_count) * 16, key0[q] = p.kb + i * kTileKeys + kr[q];
        if (key0[0] >= ke || key0[0] > pos_max) return;  // every key masked for every row (and so of the later chunks)
        float s[2 * NCH][4] = {};
#pragma unroll
        for (int q = 0; q < NCH; ++q)
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            int const row = kr[q] + 8 * nt + g;
#pragma unroll
            for (int c = 0; c < D / 32; ++c) {
              uint4 const kv = ld_16(ks + tile_offset<kTileKeys>(row, qk_chunk(c, t)));
              mma_m16n8k16<T>(s[2 * q + nt], qa[2 * c][0], qa[2 * c][1], qa[2 * c][2], qa[2 * c][3], kv.x, kv.y);
              mma_m16n8k16<T>(s[2 * q + nt], qa[2 * c + 1][0], qa[2 * c + 1][1], qa[2 * c + 1][2], qa[2 * c + 1][3],
                              kv.z, kv.w);
            }
          }
        // s[2 q + nt][e]: row g + 8 (e / 2), key key0[q] + 8 nt + 2 t + e % 2
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < 2 * NCH; ++n)
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
              int const key = key0[n / 2] + 8 * (n % 2) + 2 * t + (e & 1);
              s[n][e] = key < ke && key <= pos_row[h] ? s[n][e] * kScale : -INFINITY;
              mx = fmaxf(mx, s[n][e]);
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          float const m_new = fmaxf(m_run[h], mx);
          float const base = m_new == -INFINITY ? 0.f : m_new;
          alpha[h] = exp2f(m_run[h] - base);
          float sum = 0.f;
#pragma unroll
          for (int n = 0; n < 2 * NCH; ++n)
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
              s[n][e] = exp2f(s[n][e] - base);
              sum += s[n][e];
            }
          l_run[h] = l_run[h] * alpha[h] + sum;
          m_run[h] = m_new;
        }
#pragma unroll
        for (int q = 0; q < NCH; ++q) {
          uint32_t const pa0 = pack2<T>(s[2 * q][0], s[2 * q][1]), pa1 = pack2<T>(s[2 * q][2], s[2 * q][3]);
          uint32_t const pa2 = pack2<T>(s[2 * q + 1][0], s[2 * q + 1][1]),
                         pa3 = pack2<T>(s[2 * q + 1][2], s[2 * q + 1][3]);
          int const r0 = kr[q] + 2 * t;
#pragma unroll
          for (int hh = 0; hh < D / 64; ++hh) {
            uint4 const v0 = ld_16(vs + tile_offset<kTileKeys>(r0, 8 * hh + g));
            uint4 const v1 = ld_16(vs + tile_offset<kTileKeys>(r0 + 1, 8 * hh + g));
            uint4 const v8 = ld_16(vs + tile_offset<kTileKeys>(r0 + 8, 8 * hh + g));
            uint4 const v9 = ld_16(vs + tile_offset<kTileKeys>(r0 + 9, 8 * hh + g));
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              int const j = 8 * hh + e;
              if (q == 0) o[j][0] *= alpha[0], o[j][1] *= alpha[0], o[j][2] *= alpha[1], o[j][3] *= alpha[1];
              uint32_t const b0 = halves(word(v0, e / 2), word(v1, e / 2), e & 1);
              uint32_t const b1 = halves(word(v8, e / 2), word(v9, e / 2), e & 1);
              mma_m16n8k16<T>(o[j], pa0, pa1, pa2, pa3, b0, b1);
            }
          }
        }
      };
      if (kWide > 1 && active && kTileKeys / 16 / ks_count >= kWide)
        for (int chunk = my_ks; chunk < kTileKeys / 16; chunk += kWide * ks_count)
          step(std::integral_constant<int, kWide>{}, chunk);
      else
        for (int chunk = my_ks; active && chunk < kTileKeys / 16; chunk += ks_count)
          step(std::integral_constant<int, 1>{}, chunk);
      sync();  // buffer i % kStages is free
      if (i + kStages < num_tiles)
        issue(i + kStages);
      else
        cp_async_commit();
    }
    cp_async_wait_all();
    rt.mark(kPhaseKeys);

    // Merge the warps of each m-tile: (m, l, O) per warp and row into shared memory, then per row.
    float *my_o = scratch + warp * S::kScratchWarp, *my_ml = my_o + 16 * S::kScratchRow;
    int const tile_rows = min(16, rows - mtile * 16);  // rows past it are padding: no one reads them
    if (active) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
        l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int const row = g + 8 * (e / 2), n = 2 * t + (e & 1);
          if (row < tile_rows) my_o[row * S::kScratchRow + 64 * (j / 8) + 8 * n + j % 8] = o[j][e];
        }
      if (t == 0) {
        my_ml[g] = m_run[0], my_ml[g + 8] = m_run[1];
        my_ml[16 + g] = l_run[0], my_ml[16 + g + 8] = l_run[1];
      }
    }
    sync();
    for (int idx = tid; idx < mw * 16 * KC; idx += kThreads) {
      int const mi = idx / (16 * KC), r = idx / KC % 16, c = idx % KC, row = (pass + mi) * 16 + r;
      if (row >= rows) continue;
      float mx = -INFINITY;
      for (int k = 0; k < ks_count; ++k)
        mx = fmaxf(mx, scratch[(mi * ks_count + k) * S::kScratchWarp + 16 * S::kScratchRow + r]);
      float acc[8] = {}, l = 0.f;
      for (int k = 0; k < ks_count && mx != -INFINITY; ++k) {
        float const *wo = scratch + (mi * ks_count + k) * S::kScratchWarp;
        float const f = exp2f(wo[16 * S::kScratchRow + r] - mx);
        l += wo[16 * S::kScratchRow + 16 + r] * f;
        float4 const a = reinterpret_cast<float4 const *>(wo + r * S::kScratchRow + c * 8)[0];
        float4 const b = reinterpret_cast<float4 const *>(wo + r * S::kScratchRow + c * 8)[1];
        acc[0] += a.x * f, acc[1] += a.y * f, acc[2] += a.z * f, acc[3] += a.w * f;
        acc[4] += b.x * f, acc[5] += b.y * f, acc[6] += b.z * f, acc[7] += b.w * f;
      }
      float const inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= inv;
      int const token = p.t0 + row / G, head = row % G;
      if (p.mode != kModeKeys) {
        float lo[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) lo[e] = acc[e];
        store16(out + static_cast<int64_t>(p.q0 + token) * OUT_STRIDE + head * D + c * 8, lo);
      } else {
        int const cap = rt.batch.max_num_batched_tokens <= rt.batch.max_num_batched_requests * kKvSplitMaxTokens
                            ? p.q0 + token
                            : x * kKvSplitMaxTokens + token;
        float *ws = task.input<float>(5) + (2 * rt.batch.max_num_batched_requests * H_KV + 3) / 4 * 4;
        float *part = ws + ((static_cast<int64_t>(cap * H_KV + y) * G + head) * Z + z) * (D + kWorkspacePad);
        reinterpret_cast<float4 *>(part + c * 8)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        reinterpret_cast<float4 *>(part + c * 8)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
        if (c == 0) part[D] = l > 0.f ? mx + log2f(l) : -INFINITY;
      }
    }
    if (uses_tma) {
      // The scratch's writes before the next pass's TMA (the next task's first TMA tile fences for
      // what this one wrote: the i == 0 fence above): only a pass with one after it pays.
      if (pass + mw < mtiles) fence_proxy_async();
      // Every thread's waits are behind the merge's syncs. An init of a valid mbarrier (the next
      // pass's) is undefined, and so is other use of its memory (the next task's shared memory).
      if (tid == 0)
        for (int st = 0; st < kStages; ++st) mbarrier_inval(&bars[st]);
    }
    sync();  // the scratch is the next pass's tiles
    rt.mark(kPhaseRows);
  }

  if constexpr (Z > 1) {
    if (p.mode != kModeKeys) return;
    float *ws = task.input<float>(5);
    float *parts = ws + (2 * rt.batch.max_num_batched_requests * H_KV + 3) / 4 * 4;
    auto part_of = [&](int token, int head, int zz) {
      int const cap = rt.batch.max_num_batched_tokens <= rt.batch.max_num_batched_requests * kKvSplitMaxTokens
                          ? p.q0 + token
                          : x * kKvSplitMaxTokens + token;
      return parts + ((static_cast<int64_t>(cap * H_KV + y) * G + head) * Z + zz) * (D + kWorkspacePad);
    };
    if (empty_keys)  // nothing to contribute: say so
      for (int row = tid; row < rows; row += kThreads) part_of(p.t0 + row / G, row % G, z)[D] = -INFINITY;
    sync();
    if (tid == 0) {
      // Count this split done on its word (split_count_tag). One atomicAdd counts the split when
      // the word is current, as the start's atomicMax made it: the Z splits finish together, and a
      // compare-and-swap loop would make them retry one after another (6.8 us for the last of 16 on
      // an H100, when every split found the word stale). A split that still adds to a stale word
      // (a wrapped tag, a body run alone twice) finds out from the value returned, whose count no
      // one reads (it stays below 2 Z, far from the tag bits), and restarts the word by
      // compare-and-swap.
      auto *counter = reinterpret_cast<unsigned long long *>(ws) + x * H_KV + y;
      unsigned long long const tag = split_count_tag(rt);
      auto current = [&](unsigned long long w) { return (w & ~0xffffull) == tag && (w & 0xffffull) < Z; };
      __threadfence();  // this task's partials before its count
      unsigned long long seen = atomicAdd(counter, 1ull), next = seen + 1;
      if (!current(seen)) {
        seen = next;
        for (;;) {
          next = current(seen) ? seen + 1 : tag | 1ull;
          unsigned long long const was = atomicCAS(counter, seen, next);
          if (was == seen) break;
          seen = was;
        }
      }
      bool const last = (next & 0xffffull) == Z;
      // The merger's acquire: the other splits' partials (each fenced before its add) are ordered
      // before this fence, and the barrier below orders the whole block's loads after it, so one
      // thread fences instead of all of them.
      if (last) __threadfence();
      *last_flag = last;
    }
    sync();
    rt.mark(kPhaseCounted);
    if (!*last_flag) return;
    // P threads per (row, 16-byte chunk) when a decode's rows leave threads idle: each merges every
    // P-th split, then the P partial merges combine through shuffles, so that the merger's loads
    // go out in one round instead of one round per 8 splits.
    auto merge = [&](auto threads_per_chunk) {
      constexpr int P = decltype(threads_per_chunk)::value;
      constexpr int kPer = (Z + P - 1) / P;  // splits a thread merges
      // A running maximum over groups of up to 8 splits: the group's loads go out together, and
      // nothing branches on what they hold (a load behind such a test would wait for the one
      // before). An empty split (lse -inf) weighs 0 and its stale values are never multiplied.
      constexpr int kGroup = kPer < 8 ? kPer : 8;
      int const total = rows * KC * P;
      for (int base = 0; base < total; base += kThreads) {  // whole warps: the shuffles below
        int const idx = min(base + static_cast<int>(tid), total - 1), q = idx % P;
        int const row = idx / P / KC, c = idx / P % KC, token = row / G, head = row % G;
        float m = -INFINITY, acc[8] = {}, wsum = 0.f;
        for (int i0 = 0; i0 < kPer; i0 += kGroup) {
          float lse[kGroup];
          float4 a[kGroup], b[kGroup];
#pragma unroll
          for (int u = 0; u < kGroup; ++u) {
            int const zz = (i0 + u) * P + q;
            float const *part = part_of(token, head, min(zz, Z - 1));
            lse[u] = zz < Z ? part[D] : -INFINITY;
            a[u] = reinterpret_cast<float4 const *>(part + c * 8)[0];
            b[u] = reinterpret_cast<float4 const *>(part + c * 8)[1];
          }
#pragma unroll
          for (int u = 0; u < kGroup; ++u) {
            float const m_new = fmaxf(m, lse[u]);
            bool const none = m_new == -INFINITY, empty = lse[u] == -INFINITY;
            float const rescale = none ? 1.f : exp2f(m - m_new), f = empty ? 0.f : exp2f(lse[u] - m_new);
            float const v[8] = {a[u].x, a[u].y, a[u].z, a[u].w, b[u].x, b[u].y, b[u].z, b[u].w};
            wsum = wsum * rescale + f;
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] = acc[e] * rescale + (empty ? 0.f : f * v[e]);
            m = m_new;
          }
        }
#pragma unroll
        for (int o = 1; o < P; o *= 2) {  // the P threads of a chunk are adjacent lanes
          float const m_o = __shfl_xor_sync(0xffffffffu, m, o), w_o = __shfl_xor_sync(0xffffffffu, wsum, o);
          float const m_new = fmaxf(m, m_o);
          float const f = m == -INFINITY ? 0.f : exp2f(m - m_new), f_o = m_o == -INFINITY ? 0.f : exp2f(m_o - m_new);
          wsum = wsum * f + w_o * f_o;
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[e] = acc[e] * f + __shfl_xor_sync(0xffffffffu, acc[e], o) * f_o;
          m = m_new;
        }
        float const inv = wsum > 0.f ? 1.f / wsum : 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= inv;
        if (q == 0 && base + static_cast<int>(tid) < total)
          store16(out + static_cast<int64_t>(p.q0 + token) * OUT_STRIDE + head * D + c * 8, acc);
      }
    };
    // Threads per chunk: what a one-token decode's rows leave, at most one per split, a power of two
    // (at most 32 with D >= 64: the P threads of a chunk stay within a warp, for the shuffles).
    constexpr int kSpare = kThreads / (G * KC);
    static_assert(kSpare <= kWarpSize, "paged_attention: the merger's threads of a chunk must fit a warp");
    constexpr int kP = floor_pow2(kSpare < Z ? kSpare : Z);
    if (rows * KC * kP <= kThreads)
      merge(std::integral_constant<int, kP>{});
    else
      merge(std::integral_constant<int, 1>{});
  }
}

}  // namespace attn

// HP: kv heads per task (H_KV / grid y), 1 or 2. Two run at once, one on each half of the warps.
// R: cache rows a TMA copy takes (sm90; 0: cp.async only), tma_box_rows in tasks/paged_attention.py.
template <typename T, int D, int G, int H_KV, int Z, int HP, int R>
constexpr unsigned paged_attention_smem_bytes() {
  return HP * attn::Smem<T, D, kWorkerWarps / HP>::kBytes + attn::kSmemSlack;
}

template <typename T, int D, int G, int H_KV, int Z, int HP, int R>
__device__ __forceinline__ void paged_attention(TaskDesc const &task, Runtime const &rt) {
  using namespace attn;
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "paged_attention: bf16 or fp16");
  static_assert(D == 64 || D == 128, "paged_attention: head_dim 64 or 128");
  static_assert(G >= 1 && G <= 16 && 16 % G == 0, "paged_attention: 1, 2, 4, 8 or 16 q heads per kv head");
  static_assert(Z >= 1 && Z <= 128, "paged_attention: 1 to 128 splits");
  static_assert((HP == 1 || HP == 2) && H_KV % HP == 0, "paged_attention: 1 or 2 kv heads per task");
  constexpr int W = kWorkerWarps / HP;
  static_assert(kTargetSm < 90 || R == 0 || (R >= 16 && (16 * W) % R == 0),
                "paged_attention: TMA boxes of 16 rows to a tile's (sm90: tiles of 64 or 128 keys)");
  size_t const misaligned = __cvta_generic_to_shared(dynamic_smem) % kSmemAlign;
  unsigned char *smem = dynamic_smem + (misaligned ? kSmemAlign - misaligned : 0);
  if constexpr (HP == 1) {  // constants where it can: runtime values here cost registers (a spill at Z = 16)
    stream<T, D, G, H_KV, Z, W, R>(task, rt, task.grid_idx[1], 0, threadIdx.x, 0, smem);
  } else {
    int const half = threadIdx.x / (W * kWarpSize);
    stream<T, D, G, H_KV, Z, W, R>(task, rt, task.grid_idx[1] * HP + half, half, threadIdx.x % (W * kWarpSize),
                                   1 + half, smem + half * Smem<T, D, W>::kBytes);
  }
}

}  // namespace tasks
}  // namespace mpk
