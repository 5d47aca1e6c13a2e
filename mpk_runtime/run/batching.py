"""Offline-mode batching: the Python model of the device's ``prepare_next_batch``.

csrc/runtime/prepare_next_batch.cuh implements the same steps on the GPU; the emulator runs this
model, and the GPU tests check that both leave identical meta tensors. Keep the two in step.

A launch starts from the same state every time: ``step`` = the initial steps (``BatchConfig.
initial_step``: tokens of each request already in the KV cache, 0 unless the user passed a ``step``
meta tensor) and the free-page queue in ``BatchConfig.page_order`` (0, 1, ... unless the user passed
a ``paged_kv_indices_buffer``, which then gives the order pages are handed out in).

At every END_OF_TASK_GRAPH event (and once before the first iteration):
1. finalize the iteration that just ran: advance ``step`` of every batched request by its tokens;
   a request whose prompt is complete gets its sampled token (the last ``output_tokens`` entry of
   its chunk) appended to ``tokens``; it finishes on ``eos_token_id`` or once its row holds
   ``stop_lengths`` tokens (default: a full row), and its pages return to the page queue. In test
   mode the second call stops here and returns False.
2. build the next batch: running requests first (a decode token, or the next prefill chunk), then
   new requests in order while slots, token budget and free pages allow; prefill chunks are capped
   by the remaining ``max_num_batched_tokens``. A request admitted with history (step > 0) starts
   at its step: the rest of its prompt, or one decode token if the prompt is all history.
3. for every batched request: take pages from the queue to cover its KV length (history included),
   and write ``input_tokens``, ``qo_indptr``, the paged-KV indptr / indices / last-page lengths and
   ``num_new_tokens``. Slots past the batch get empty ranges (``qo_indptr`` and
   ``paged_kv_indptr`` repeat their last entry, last-page length 0), so a task of an unused slot
   sees no tokens.
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
    initial_step: tuple[int, ...] = ()  # per request, at every launch; () means all 0
    page_order: tuple[int, ...] = ()  # the free-page queue at every launch; () means 0, 1, ...

    @property
    def max_pages_per_request(self) -> int:
        return -(-self.max_seq_length // self.page_size)

    @property
    def steps_at_launch(self) -> list[int]:
        return list(self.initial_step) if self.initial_step else [0] * self.total_num_requests

    @property
    def pages_at_launch(self) -> list[int]:
        return list(self.page_order) if self.page_order else list(range(self.max_num_pages))

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    def first_chunk(self, prompt: int, step: int) -> int:
        """Tokens of a request's first batch: the rest of its prompt, capped by the token budget,
        or one decode token when its history already covers the prompt."""
        return min(prompt - step, self.max_num_batched_tokens) if prompt > step else 1


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
        self.page_queue = cfg.pages_at_launch  # free pages, FIFO
        self.next_request = 0
        self.m["step"].copy_(torch.tensor(cfg.steps_at_launch, dtype=torch.int32))

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
                if tok == cfg.eos_token_id or step + 1 >= int(m["stop_lengths"][req]):
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
            step = int(m["step"][req])
            remaining = int(m["prompt_lengths"][req]) - step
            n = min(remaining, budget) if remaining > 0 else 1
            if cfg.pages_for(step + n) > len(self.page_queue):
                break  # admission waits for pages
            self.next_request += 1
            self.running.append(req)
            self._add(req, n)
            budget -= n
        if not self.batch and self.next_request < cfg.total_num_requests:
            req = self.next_request
            step = int(m["step"][req])
            need = cfg.pages_for(step + cfg.first_chunk(int(m["prompt_lengths"][req]), step))
            raise PagesExhausted(
                f"request {self.next_request} waits for {need} KV pages and nothing runs that could free them "
                f"({len(self.page_queue)} free); raise max_num_pages (now {cfg.max_num_pages})"
            )
        size = len(self.batch)
        qo[size + 1 :] = int(qo[size])
        m["paged_kv_indptr_buffer"][size + 1 :] = int(m["paged_kv_indptr_buffer"][size])
        m["paged_kv_last_page_len_buffer"][size:] = 0
        m["num_new_tokens"][0] = int(qo[size])
        return bool(self.batch)

    def _add(self, req: int, n: int) -> None:
        cfg, m = self.cfg, self.m
        slot = len(self.batch)
        step = int(m["step"][req])
        kv_len = step + n
        need = -(-kv_len // cfg.page_size)
        while len(self.pages[req]) < need:
            if not self.page_queue:
                raise PagesExhausted(  # the pages of its tokens so far: more come as it grows
                    f"request {req} needs {need} KV pages for its first {kv_len} tokens (page_size={cfg.page_size}) "
                    f"and the page queue is empty; raise max_num_pages (now {cfg.max_num_pages})"
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
