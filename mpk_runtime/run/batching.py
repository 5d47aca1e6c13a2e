"""Offline-mode batching: the Python model of the device's ``prepare_next_batch``.

csrc/runtime/prepare_next_batch.cuh implements the same steps on the GPU; the emulator runs this
model, and the GPU tests check that both leave identical meta tensors. Keep the two in step.

At every END_OF_TASK_GRAPH event (and once before the first iteration):
1. finalize the iteration that just ran: advance ``step`` of every batched request by its tokens;
   a request whose prompt is complete gets its sampled token (the last ``output_tokens`` entry of
   its chunk) appended to ``tokens``; it finishes on ``eos_token_id`` or a full row, and its pages
   return to the page queue. In test mode the second call stops here and returns False.
2. build the next batch: running requests first (a decode token, or the next prefill chunk), then
   new requests in order while slots, token budget and free pages allow; prefill chunks are capped
   by the remaining ``max_num_batched_tokens``.
3. for every batched request: take pages from the queue to cover its KV length, and write
   ``input_tokens``, ``qo_indptr``, the paged-KV indptr / indices / last-page lengths and
   ``num_new_tokens``.
Returns whether the batch has any request (False terminates the kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import KernelError


@dataclass(frozen=True)
class BatchConfig:
    max_num_batched_tokens: int
    max_num_batched_requests: int
    max_num_pages: int
    page_size: int
    max_seq_length: int
    total_num_requests: int
    eos_token_id: int
    test_mode: bool

    @property
    def max_pages_per_request(self) -> int:
        return -(-self.max_seq_length // self.page_size)


class PagesExhausted(KernelError):
    """A running request needs a KV page and the page queue is empty."""


class BatchPlanner:
    """The batching state of one launch, acting on the meta tensors in place (CPU tensors)."""

    def __init__(self, cfg: BatchConfig, meta: dict[str, torch.Tensor]):
        self.cfg = cfg
        self.m = meta
        self.running: list[int] = []
        self.batch: list[int] = []
        self.pages: list[list[int]] = [[] for _ in range(cfg.total_num_requests)]
        self.page_queue = list(range(cfg.max_num_pages))  # free pages, FIFO
        self.next_request = 0
        self.m["step"].zero_()

    def prepare_next_batch(self, iteration: int) -> bool:
        cfg, m = self.cfg, self.m
        qo = m["qo_indptr_buffer"]
        for slot, req in enumerate(self.batch):
            n = int(qo[slot + 1] - qo[slot])
            m["step"][req] += n
            step = int(m["step"][req])
            if step >= int(m["prompt_lengths"][req]):
                tok = int(m["output_tokens"][int(qo[slot + 1]) - 1])
                if step < cfg.max_seq_length:
                    m["tokens"][req, step] = tok
                if tok == cfg.eos_token_id or step + 1 >= cfg.max_seq_length:
                    self._finish(req)
        self.batch = []
        if cfg.test_mode and iteration > 0:
            return False

        budget = cfg.max_num_batched_tokens
        qo[0] = 0
        m["paged_kv_indptr_buffer"][0] = 0
        for req in list(self.running):
            if len(self.batch) == cfg.max_num_batched_requests or budget == 0:
                break
            remaining = int(m["prompt_lengths"][req] - m["step"][req])
            n = min(remaining, budget) if remaining > 0 else 1
            self._add(req, n)
            budget -= n
        while (
            self.next_request < cfg.total_num_requests
            and len(self.running) < cfg.max_num_batched_requests
            and len(self.batch) < cfg.max_num_batched_requests
            and budget > 0
        ):
            req = self.next_request
            n = min(int(m["prompt_lengths"][req]), budget)
            if -(-n // cfg.page_size) > len(self.page_queue):
                break  # admission waits for pages
            self.next_request += 1
            self.running.append(req)
            self._add(req, n)
            budget -= n
        if not self.batch and self.next_request < cfg.total_num_requests:
            need = -(-min(int(m["prompt_lengths"][self.next_request]), cfg.max_num_batched_tokens) // cfg.page_size)
            raise PagesExhausted(
                f"request {self.next_request} waits for {need} KV pages and nothing runs that could free them "
                f"({len(self.page_queue)} free); raise max_num_pages (now {cfg.max_num_pages})"
            )
        m["num_new_tokens"][0] = int(qo[len(self.batch)])
        return bool(self.batch)

    def _add(self, req: int, n: int) -> None:
        cfg, m = self.cfg, self.m
        slot = len(self.batch)
        step = int(m["step"][req])
        kv_len = step + n
        need = -(-kv_len // cfg.page_size)
        while len(self.pages[req]) < need:
            if not self.page_queue:
                raise PagesExhausted(
                    f"request {req} needs {need} KV pages and the page queue is empty; "
                    f"raise max_num_pages (now {cfg.max_num_pages})"
                )
            self.pages[req].append(self.page_queue.pop(0))
        qo, kv = m["qo_indptr_buffer"], m["paged_kv_indptr_buffer"]
        q0, k0 = int(qo[slot]), int(kv[slot])
        m["input_tokens"][q0 : q0 + n] = m["tokens"][req, step : step + n]
        qo[slot + 1] = q0 + n
        kv[slot + 1] = k0 + need
        m["paged_kv_indices_buffer"][k0 : k0 + need] = torch.tensor(self.pages[req][:need], dtype=torch.int32)
        m["paged_kv_last_page_len_buffer"][slot] = kv_len - (need - 1) * cfg.page_size
        self.batch.append(req)

    def _finish(self, req: int) -> None:
        self.page_queue.extend(self.pages[req])
        self.pages[req] = []
        self.running.remove(req)


def run_iterations(cfg: BatchConfig, meta: dict[str, torch.Tensor], body=None) -> int:
    """Drive the protocol of one launch on the CPU: prepare, run ``body(iteration)``, repeat until
    prepare_next_batch returns False. Returns the number of iterations the graph ran."""
    planner = BatchPlanner(cfg, meta)
    iteration = 0
    while planner.prepare_next_batch(iteration):
        if body is not None:
            body(iteration)
        iteration += 1
    return iteration
