// Offline-mode batching on the device, run by the controller at every END_OF_TASK_GRAPH event.
// mpk_runtime/batching.py is the Python model of exactly these steps (read its docstring for the
// protocol); the GPU tests compare the meta tensors both produce. Keep the two in step.
//
// The work is a few loops over at most max_num_batched_requests requests, so lane 0 of the
// controller warp runs it alone; bulk initialisation uses the whole warp.
#pragma once
#include "runtime/abi.h"

namespace mpk {
namespace batching {

struct Planner {
  MpkMeta const &m;
  MpkBatchConfig const &cfg;
  MpkBatchState const &s;
  MpkStatus *status;

  __device__ __forceinline__ int32_t &counter(int i) const { return s.counters[i]; }

  // Whole warp: the state every launch starts from: the initial steps (tokens already in the KV
  // cache) and the initial order of the free-page queue, both given by the host.
  __device__ void init(int lane) const {
    for (int r = lane; r < cfg.total_num_requests; r += 32) {
      m.step[r] = s.initial_step[r];
      s.request_num_pages[r] = 0;
    }
    for (int i = lane; i < cfg.max_num_pages; i += 32) s.page_queue[i] = s.page_order[i];
    if (lane == 0) {
      counter(MPK_BATCH_NUM_RUNNING) = 0;
      counter(MPK_BATCH_BATCH_SIZE) = 0;
      counter(MPK_BATCH_NEXT_REQUEST) = 0;
      counter(MPK_BATCH_PAGE_HEAD) = 0;
      counter(MPK_BATCH_FREE_PAGES) = cfg.max_num_pages;
    }
    __syncwarp();
  }

  __device__ int32_t pages_for(int32_t tokens) const { return (tokens + cfg.page_size - 1) / cfg.page_size; }

  __device__ void finish(int32_t req) const {
    int32_t &free = counter(MPK_BATCH_FREE_PAGES);
    int32_t const head = counter(MPK_BATCH_PAGE_HEAD);
    int32_t *pages = s.request_pages + static_cast<int64_t>(req) * cfg.max_pages_per_request;
    for (int32_t j = 0; j < s.request_num_pages[req]; ++j) {
      s.page_queue[(head + free) % cfg.max_num_pages] = pages[j];
      ++free;
    }
    s.request_num_pages[req] = 0;
    int32_t &num_running = counter(MPK_BATCH_NUM_RUNNING);
    int32_t k = 0;
    for (int32_t i = 0; i < num_running; ++i)
      if (s.running[i] != req) s.running[k++] = s.running[i];
    num_running = k;
  }

  // Puts `n` tokens of `req` into batch slot `slot`. False: the page queue ran dry.
  __device__ bool add(int32_t slot, int32_t req, int32_t n) const {
    int32_t const step = m.step[req];
    int32_t const kv_len = step + n;
    int32_t const need = pages_for(kv_len);
    int32_t *pages = s.request_pages + static_cast<int64_t>(req) * cfg.max_pages_per_request;
    int32_t &free = counter(MPK_BATCH_FREE_PAGES);
    int32_t &head = counter(MPK_BATCH_PAGE_HEAD);
    while (s.request_num_pages[req] < need) {
      if (free == 0) {
        status->detail[0] = req;
        status->detail[1] = need;
        status->detail[2] = s.request_num_pages[req];
        status->code = MPK_STATUS_PAGES_EXHAUSTED;
        return false;
      }
      pages[s.request_num_pages[req]++] = s.page_queue[head];
      head = (head + 1) % cfg.max_num_pages;
      --free;
    }
    int32_t const q0 = m.qo_indptr[slot], k0 = m.paged_kv_indptr[slot];
    int64_t const *row = m.tokens + static_cast<int64_t>(req) * cfg.max_seq_length;
    for (int32_t j = 0; j < n; ++j) m.input_tokens[q0 + j] = row[step + j];
    m.qo_indptr[slot + 1] = q0 + n;
    m.paged_kv_indptr[slot + 1] = k0 + need;
    for (int32_t j = 0; j < need; ++j) m.paged_kv_indices[k0 + j] = pages[j];
    m.paged_kv_last_page_len[slot] = kv_len - (need - 1) * cfg.page_size;
    s.batch[slot] = req;
    return true;
  }

  // Lane 0 only. Returns 1 when a batch is ready, 0 when the kernel should stop, -1 on error.
  __device__ int prepare_next_batch(uint32_t iteration) const {
    int32_t &batch_size = counter(MPK_BATCH_BATCH_SIZE);
    for (int32_t slot = 0; slot < batch_size; ++slot) {
      int32_t const req = s.batch[slot];
      int32_t const n = m.qo_indptr[slot + 1] - m.qo_indptr[slot];
      int32_t const step = (m.step[req] += n);
      if (step >= m.prompt_lengths[req]) {
        int64_t const tok = m.output_tokens[m.qo_indptr[slot + 1] - 1];
        if (step < cfg.max_seq_length) m.tokens[static_cast<int64_t>(req) * cfg.max_seq_length + step] = tok;
        if (tok == cfg.eos_token_id || step + 1 >= m.stop_lengths[req]) finish(req);  // stop_lengths <= max_seq_length
      }
    }
    batch_size = 0;
    if (cfg.test_mode && iteration > 0) return 0;

    int32_t budget = cfg.max_num_batched_tokens;
    int32_t slot = 0;
    m.qo_indptr[0] = 0;
    m.paged_kv_indptr[0] = 0;
    int32_t const num_running = counter(MPK_BATCH_NUM_RUNNING);
    for (int32_t i = 0; i < num_running && slot < cfg.max_num_batched_requests && budget > 0; ++i) {
      int32_t const req = s.running[i];
      int32_t const remaining = m.prompt_lengths[req] - m.step[req];
      int32_t const n = remaining > 0 ? min(remaining, budget) : 1;
      if (!add(slot, req, n)) return -1;
      ++slot;
      budget -= n;
    }
    int32_t &next = counter(MPK_BATCH_NEXT_REQUEST);
    int32_t &running = counter(MPK_BATCH_NUM_RUNNING);
    while (next < cfg.total_num_requests && running < cfg.max_num_batched_requests &&
           slot < cfg.max_num_batched_requests && budget > 0) {
      int32_t const req = next;
      int32_t const step = m.step[req];
      int32_t const remaining = m.prompt_lengths[req] - step;
      int32_t const n = remaining > 0 ? min(remaining, budget) : 1;  // history may cover the prompt
      if (pages_for(step + n) > counter(MPK_BATCH_FREE_PAGES)) break;  // admission waits for pages
      ++next;
      s.running[running++] = req;
      if (!add(slot, req, n)) return -1;
      ++slot;
      budget -= n;
    }
    if (slot == 0 && next < cfg.total_num_requests) {
      // A request waits for pages and nothing runs that could free them (the host checks the
      // sizes up front; this is the safety net): an error, never a silent stop.
      int32_t const step = m.step[next];
      int32_t const remaining = m.prompt_lengths[next] - step;
      status->detail[0] = next;
      status->detail[1] = pages_for(step + (remaining > 0 ? min(remaining, cfg.max_num_batched_tokens) : 1));
      status->detail[2] = 0;
      status->code = MPK_STATUS_PAGES_EXHAUSTED;
      return -1;
    }
    batch_size = slot;
    // Slots past the batch: empty ranges, so that a task of an unused slot sees no tokens.
    for (int32_t j = slot; j < cfg.max_num_batched_requests; ++j) {
      m.qo_indptr[j + 1] = m.qo_indptr[slot];
      m.paged_kv_indptr[j + 1] = m.paged_kv_indptr[slot];
      m.paged_kv_last_page_len[j] = 0;
    }
    *m.num_new_tokens = m.qo_indptr[slot];
    return slot > 0 ? 1 : 0;
  }
};

}  // namespace batching
}  // namespace mpk
