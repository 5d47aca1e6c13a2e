"""After a test-mode launch on the GPU: the meta tensors the device's prepare_next_batch left, against
its Python model.

The emulator compares the device's planner (run on the host) with the model at every call
(host_batching.py). On the GPU both calls of a test-mode launch happen inside it, so the harness
compares once, afterwards: the model plans iteration 0 on the meta tensors as they were before the
launch, takes from the device what the iteration's tasks wrote into meta tensors (output_tokens of
a sampling layer), and finalizes the iteration as the device's second call does. Every meta tensor
must then be identical: a planner bug that no task body reads (a last-page length, a page index of
an idle slot) shows here, not in any output.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import contract
from ..errors import KernelError
from .batching import BatchConfig, BatchPlanner, PagesExhausted

FIELD_OF = {name: field for field, name in contract.META_FIELDS.items()}
DEVICE_CODE = "csrc/runtime/prepare_next_batch.cuh"
MODEL = "mpk_runtime/run/batching.py"


def first_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[str, str, Any, Any] | None:
    """The first meta tensor of ``a`` that differs from ``b``: its field name, the first index that
    differs (as text) and the two values there; None when all are equal."""
    for name, x in a.items():
        y = b[name]
        if torch.equal(x, y):
            continue
        index = tuple(int(i) for i in (x != y).nonzero()[0])
        return f"{FIELD_OF.get(name, name)}[{', '.join(map(str, index))}]", name, x[index].item(), y[index].item()
    return None


def disagreement(device: dict[str, torch.Tensor], model: dict[str, torch.Tensor]) -> str | None:
    """'disagree on <field>[i, j]: the device wrote a, the model b (...)' for the first meta tensor
    that differs, or None."""
    found = first_difference(device, model)
    if found is None:
        return None
    at, name, d, m = found
    return f"disagree on {at}: the device wrote {d}, the model {m} (device {_short(device[name])}, model {_short(model[name])})"


def meta_written(meta: dict[str, torch.Tensor], written: list[torch.Tensor]) -> set[str]:
    """The meta tensors whose bytes a graph tensor that some layer writes shares (a sampling layer's
    output tokens): the tasks' values of those are the launch's; every other is prepare_next_batch's."""

    def span(t: torch.Tensor) -> tuple[int, int]:
        return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()

    spans = [span(t) for t in written if t.numel()]
    return {n for n, m in meta.items() if m.numel() and any(lo < span(m)[1] and span(m)[0] < hi for lo, hi in spans)}


def check_test_launch(
    cfg: BatchConfig, before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], written: set[str]
) -> None:
    """KernelError unless ``after`` (the meta tensors once the launch finished, on the CPU) is what
    the model makes of ``before`` (the same, taken before the launch). ``written``: the meta tensors
    the graph's tasks write; their values come from the device."""
    if not cfg.test_mode:
        raise ValueError("check_test_launch: the check models a test-mode launch (one iteration)")
    model = {k: v.clone() for k, v in before.items()}
    planner = BatchPlanner(cfg, model)
    try:
        planned = planner.prepare_next_batch(0)
    except PagesExhausted as e:
        raise KernelError(
            f"the test-mode launch ran, but the Python model of prepare_next_batch ({MODEL}) found no pages for its batch: {e}"
        ) from None
    for name in written:
        model[name].copy_(after[name])
    if planned:
        planner.prepare_next_batch(1)  # the device's second call: finalize the iteration, then stop
    first = first_difference(after, model)
    if first is not None:
        name = first[1]
        suspect = (
            ""
            if name in written
            else f"; no layer writes {FIELD_OF.get(name, name)}, so a task that should only read it may have written this "
            "value instead: the emulated run (--mpk-backend emulate) checks what each task writes"
        )
        raise KernelError(
            f"after the test-mode launch, prepare_next_batch on the GPU ({DEVICE_CODE}) and its Python model ({MODEL}) "
            f"{disagreement(after, model)}{suspect}"
        )


def _short(t: torch.Tensor) -> str:
    values = t.flatten().tolist()
    return str(values[:16])[:-1] + (", ...]" if len(values) > 16 else "]")
