"""The eleven meta tensors: their shapes, dtypes and default contents, and validation of overrides.

Shapes follow the kernel parameters (``R`` = total_num_requests: the rows of ``tokens``, else of
``prompt_lengths``, ``stop_lengths`` or ``step``, else 1):

================================  =============================  =====  ==========================
name                              shape                          dtype  default contents
================================  =============================  =====  ==========================
tokens                            (R, max_seq_length)            int64  token ids 1..1000, repeating
step                              (R,)                           int32  zeros (set at every launch)
prompt_lengths                    (R,)                           int32  max_num_batched_tokens
stop_lengths                      (R,)                           int32  max_seq_length (a full row)
input_tokens                      (max_num_batched_tokens,)      int64  filled by prepare_next_batch
output_tokens                     (max_num_batched_tokens,)      int64  zeros (written by sampling)
num_new_tokens                    (1,)                           int32  filled by prepare_next_batch
qo_indptr_buffer                  (max_num_batched_requests+1,)  int32  filled by prepare_next_batch
paged_kv_indptr_buffer            (max_num_batched_requests+1,)  int32  filled by prepare_next_batch
paged_kv_indices_buffer           (max_num_pages,)               int32  filled by prepare_next_batch
paged_kv_last_page_len_buffer     (max_num_batched_requests,)    int32  filled by prepare_next_batch
================================  =============================  =====  ==========================

A request finishes when it samples ``eos_token_id`` or once its row of ``tokens`` holds
``stop_lengths`` tokens (its prompt and what it generated; every request generates at least one).

The defaults are *useful*: one request whose prompt is exactly max_num_batched_tokens long, so the
first iteration's active-token count equals the batch and every task does real work.

Two overrides also set the state every launch starts from (``batch_config`` snapshots them when the
kernel is made, so later writes to the tensors do not change it):

- ``step``: per request, the tokens already in the KV cache (history). A request with step s starts
  at token s: the rest of its prompt as prefill, or, when ``prompt_lengths`` <= s, one decode token
  (``tokens[r, s]``). Its first batch takes the pages for all s + n tokens from the page queue, so a
  test fills the cache at the slots ``mpk_runtime.harness.first_batch_meta`` predicts.
- ``paged_kv_indices_buffer``: a permutation of 0 .. max_num_pages-1, the order in which free pages
  are handed out (a non-contiguous page table for tests). Without it pages go out in order.
"""

from __future__ import annotations

import torch

from .. import memory
from ..contract import META_TENSORS as NAMES
from ..errors import MetaTensorError, near_hint, shown
from ..run.batching import BatchConfig
from . import meta_contents
from .params import KernelParams


def total_num_requests(overrides: dict[str, torch.Tensor]) -> int:
    return _requests_from(overrides)[0]


def _requests_from(overrides: dict[str, torch.Tensor]) -> tuple[int, str | None]:
    """The request count and the override that gives it (None: the default, 1)."""
    for name in ("tokens", "prompt_lengths", "stop_lengths", "step"):
        t = overrides.get(name)
        if isinstance(t, torch.Tensor) and t.dim() >= 1:
            return int(t.shape[0]), name
    return 1, None


def expected(p: KernelParams, requests: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    i32, i64 = torch.int32, torch.int64
    return {
        "tokens": ((requests, p.max_seq_length), i64),
        "step": ((requests,), i32),
        "prompt_lengths": ((requests,), i32),
        "stop_lengths": ((requests,), i32),
        "input_tokens": ((p.max_num_batched_tokens,), i64),
        "output_tokens": ((p.max_num_batched_tokens,), i64),
        "num_new_tokens": ((1,), i32),
        "qo_indptr_buffer": ((p.max_num_batched_requests + 1,), i32),
        "paged_kv_indptr_buffer": ((p.max_num_batched_requests + 1,), i32),
        "paged_kv_indices_buffer": ((p.max_num_pages,), i32),
        "paged_kv_last_page_len_buffer": ((p.max_num_batched_requests,), i32),
    }


def default_tensor(name: str, shape: tuple[int, ...], dtype: torch.dtype, p: KernelParams, device) -> torch.Tensor:
    if name == "tokens":
        ids = torch.arange(shape[0] * shape[1], dtype=dtype) % 1000 + 1
        return ids.reshape(shape).to(device)
    if name == "prompt_lengths":
        return torch.full(shape, p.max_num_batched_tokens, dtype=dtype, device=device)
    if name == "stop_lengths":
        return torch.full(shape, p.max_seq_length, dtype=dtype, device=device)
    return torch.zeros(shape, dtype=dtype, device=device)


def build(p: KernelParams, device: torch.device) -> dict[str, torch.Tensor]:
    """The eleven meta tensors for kernel parameters ``p``: the user's overrides, validated, and
    defaults for the rest. Raises MetaTensorError / ConfigError with the fix."""
    overrides = p.meta_tensors
    for name in overrides:
        if name not in NAMES:
            raise MetaTensorError(f"unknown meta tensor {name!r}; {near_hint(name, NAMES, 'known:')}")
    requests = total_num_requests(overrides)
    if requests < 1:
        raise MetaTensorError(
            "the meta tensors describe 0 requests (tokens / prompt_lengths have no rows); give at least one request"
        )
    check_budget(p, requests, device)
    meta = {}
    for name, (shape, dtype) in expected(p, requests).items():
        t = overrides.get(name)
        if t is None:
            meta[name] = default_tensor(name, shape, dtype, p, device)
            continue
        if not isinstance(t, torch.Tensor):
            raise MetaTensorError(
                f"meta tensor {name!r} must be a torch.Tensor, got {shown(t)}; pass "
                f"torch.tensor(..., dtype={dtype}) of shape {shape}"
            )
        if t.dtype != dtype:
            raise MetaTensorError(f"meta tensor {name!r} has dtype {t.dtype}; it must be {dtype}: pass t.to({dtype})")
        if tuple(t.shape) != shape:
            rule = _shape_rule(name)
            source = _requests_from(overrides)[1]
            if rule.startswith("total_num_requests") and source not in (None, name):
                rule += f", {requests} from the rows of {source!r}"
            raise MetaTensorError(
                f"meta tensor {name!r} has shape {tuple(t.shape)}; with these parameters it must be {shape} ({rule})"
            )
        if not t.is_contiguous():
            raise MetaTensorError(f"meta tensor {name!r} is not contiguous; pass t.contiguous()")
        if not p.compile_only and t.is_meta:
            raise MetaTensorError(
                f"meta tensor {name!r} is a tensor on the meta device, which holds no data; make it on {device}"
            )
        if not p.compile_only and t.device != device:
            raise MetaTensorError(f"meta tensor {name!r} is on {t.device}; the kernel runs on {device}: pass t.to('{device}')")
        meta[name] = t
    meta_contents.check(p, meta)
    return meta


# Bytes per unit of what the runtime allocates from the init parameters besides the meta tensors.
SCHEDULE_BYTES_PER_WORKER = 256  # host: queues, placement state (graph/schedule.py)
DEVICE_BYTES_PER_WORKER = 16  # progress and status words (run/device_graph.py)
EMULATED_BYTES_PER_PAGE = 40  # the emulator's page queue, a Python list (run/batching.py)


def check_budget(p: KernelParams, requests: int, device: torch.device) -> None:
    """MemoryBudgetError before anything is allocated when the meta tensors to be made and the
    runtime's state sized by the init parameters do not fit (mpk_runtime.memory)."""
    made = [
        memory.tensor_need(f"meta tensor {name!r}", shape, dtype).renamed(_shape_rule(name))
        for name, (shape, dtype) in expected(p, requests).items()
        if name not in p.meta_tensors
    ]
    host = [memory.Need(f"the schedule of num_workers={p.num_workers}", SCHEDULE_BYTES_PER_WORKER * p.num_workers)]
    if p.emulate:
        host.append(memory.Need(f"the page queue of max_num_pages={p.max_num_pages}", EMULATED_BYTES_PER_PAGE * p.max_num_pages))
    elif not p.compile_only:
        pages = requests * -(-p.max_seq_length // p.page_size)
        made += [
            memory.Need(f"the page table of {requests} request(s) x max_seq_length / page_size", 4 * pages),
            memory.Need(f"the page queue of max_num_pages={p.max_num_pages}", 4 * p.max_num_pages),
            memory.Need(f"the state of num_workers={p.num_workers}", DEVICE_BYTES_PER_WORKER * p.num_workers),
        ]
    fix = "lower the init parameters that size it"
    if device.type == "cpu":
        memory.check(made + host, device, "PersistentKernel", fix)
    else:
        memory.check(made, device, "PersistentKernel", fix)
        memory.check(host, torch.device("cpu"), "PersistentKernel", fix)


def _shape_rule(name: str) -> str:
    return {
        "tokens": "total_num_requests x max_seq_length",
        "step": "total_num_requests",
        "prompt_lengths": "total_num_requests",
        "stop_lengths": "total_num_requests",
        "input_tokens": "max_num_batched_tokens",
        "output_tokens": "max_num_batched_tokens",
        "num_new_tokens": "one element",
        "qo_indptr_buffer": "max_num_batched_requests + 1",
        "paged_kv_indptr_buffer": "max_num_batched_requests + 1",
        "paged_kv_indices_buffer": "max_num_pages",
        "paged_kv_last_page_len_buffer": "max_num_batched_requests",
    }[name]


def batch_config(p: KernelParams, meta: dict[str, torch.Tensor]) -> BatchConfig:
    """The batching configuration, with the launch state the meta tensors give now: the initial
    ``step`` of every request and, when the user passed one, the page order."""
    on_meta = meta["step"].device.type == "meta"
    steps = () if on_meta else tuple(int(v) for v in meta["step"].cpu().tolist())
    order: tuple[int, ...] = ()
    if "paged_kv_indices_buffer" in p.meta_tensors and meta["paged_kv_indices_buffer"].device.type != "meta":
        order = tuple(int(v) for v in meta["paged_kv_indices_buffer"].cpu().tolist())
    return BatchConfig(
        max_num_batched_tokens=p.max_num_batched_tokens,
        max_num_batched_requests=p.max_num_batched_requests,
        max_num_pages=p.max_num_pages,
        page_size=p.page_size,
        max_seq_length=p.max_seq_length,
        total_num_requests=int(meta["tokens"].shape[0]),
        eos_token_id=p.eos_token_id,
        test_mode=p.test_mode,
        initial_step=steps if any(steps) else (),
        page_order=order,
    )
