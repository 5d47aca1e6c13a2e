"""What a scene gives of the meta tensors, checked before the run can silently test something else:
meta outputs (``Out(..., meta=True)``), ``kernel_params`` overrides and their repeatability, and,
after a test-mode run, the requests its one iteration had no room for."""

from __future__ import annotations

from typing import Any

import torch

from mpk_runtime import harness
from mpk_runtime.harness import shown

from .scene import InOut, Out, SceneError


def check_meta_outputs(where: str, args: dict[str, Any]) -> None:
    """SceneError for an Out(..., meta=True) the run cannot take: a name that is no meta tensor, an
    Out of what the launch reads as given (it would start from the poison), an InOut of what
    prepare_next_batch fills (its values would be replaced unseen)."""
    wrong = [n for n, v in args.items() if isinstance(v, Out) and v.meta and n not in harness.META_TENSOR_NAMES]
    if wrong:
        raise SceneError(
            f"{where}: Out(..., meta=True) stands for the meta tensor of its name, but {wrong} is not one; "
            f"the meta tensors are {', '.join(harness.META_TENSOR_NAMES)}"
        )
    for name, v in args.items():
        if not (isinstance(v, Out) and v.meta):
            continue
        if name in harness.META_LAUNCH_INPUTS and not isinstance(v, InOut):
            raise SceneError(
                f"{where}: Out({name!r}, meta=True): the launch reads {name!r} as given (the requests, their history, "
                f"the free-page order), and an Out starts as poison; pass InOut(..., meta=True) with its values"
            )
        if name in harness.META_PLANNED and isinstance(v, InOut):
            raise SceneError(
                f"{where}: InOut({name!r}, meta=True): prepare_next_batch fills {name!r} before any task runs, so the "
                f"values given would be replaced unseen; pass Out(..., meta=True)"
            )


def check_overrides(scene: str, meta: dict[str, Any]) -> None:
    """SceneError for a ``kernel_params`` meta tensor the run cannot take: one prepare_next_batch fills,
    or a tensor on the meta device."""
    planned = [k for k in meta if k in harness.META_PLANNED]
    if planned:
        raise SceneError(
            f"{scene}.kernel_params: meta_tensors[{planned[0]!r}] is filled by prepare_next_batch before "
            f"the graph runs, so the values given would be replaced unseen; leave it out (compute_golden reads what "
            f"the run used in args.meta)"
        )
    on_meta = [k for k, v in meta.items() if isinstance(v, torch.Tensor) and v.is_meta]
    if on_meta:
        raise SceneError(
            f"{scene}.kernel_params: meta_tensors[{on_meta[0]!r}] is a tensor on the meta device, which "
            f"holds no data; make it on the CPU (the harness copies it to the case's device)"
        )


def check_repeatable(scene: str, first: dict[str, Any], second: dict[str, Any]) -> None:
    """SceneError unless two calls of ``kernel_params`` with the same params agree: the harness and
    ``first_batch_meta`` each call it, so a random page order drawn anew each time would put a
    history that generate_args writes where the kernel never reads it."""
    pairs = [(f"[{k!r}]", first.get(k), second.get(k)) for k in dict.fromkeys([*first, *second]) if k != "meta_tensors"]
    m1, m2 = first.get("meta_tensors"), second.get("meta_tensors")
    if isinstance(m1, dict) and isinstance(m2, dict):
        pairs += [(f"['meta_tensors'][{k!r}]", m1.get(k), m2.get(k)) for k in dict.fromkeys([*m1, *m2])]
    for where, a, b in pairs:
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            same = a.is_meta or b.is_meta or (a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu()))
        else:
            same = type(a) is type(b) and not isinstance(a, torch.Tensor) and _equal(a, b)
        if not same:
            raise SceneError(
                f"{scene}.kernel_params returned {_brief(a)} for {where} once and {_brief(b)} the next time, "
                f"for the same params; the harness and first_batch_meta each call it, so it must return the same every "
                f"time: draw random values from a seeded generator (torch.randperm(n, generator=torch.Generator()"
                f".manual_seed(0)))"
            )


def _brief(v: Any) -> str:
    if isinstance(v, torch.Tensor) and not v.is_meta:
        values = v.flatten()[:8].tolist()
        return f"{str(values)[:-1]}{', ...' if v.numel() > 8 else ''}] ({v.dtype}, shape {tuple(v.shape)})"
    return shown(v)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - what cannot be compared is left to the runtime's own checks
        return True


def requests_not_run(pk, steps_before: list[int]) -> list[str]:
    """A note when test mode's one iteration had no room for some requests: they never ran, so a
    golden made from args.meta checks the others only."""
    if not pk.test_mode:
        return []
    idle = [r for r, (a, b) in enumerate(zip(steps_before, pk.meta_tensors["step"].cpu().tolist())) if a == b]
    if not idle:
        return []
    p = pk.params
    return [
        f"test mode ran {len(steps_before) - len(idle)} of {len(steps_before)} requests in its one iteration; "
        f"request(s) {idle} did not fit (max_num_batched_requests={p.max_num_batched_requests}, max_num_batched_tokens="
        f"{p.max_num_batched_tokens}, max_num_pages={p.max_num_pages}) and were not run"
    ]
