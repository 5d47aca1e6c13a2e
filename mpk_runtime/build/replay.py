"""Replaying a compile output directory: which kernel to rebuild, and which tensors bind to it.

``PersistentKernel.from_artifacts`` (the front end) calls ``plan``; the saved source is built as it
is now (an edited file is rebuilt, an unchanged one comes from the cache) and the saved graph is
uploaded as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import dtypes
from ..errors import ConfigError, GraphError, ShapeError
from ..graph.shuffle import shuffle
from .artifacts import CompileOutput, read


@dataclass
class ReplayPlan:
    output: CompileOutput
    init_params: dict[str, Any]  # PersistentKernel parameters, before the caller's overrides
    target_cc: int


def init_params(plan: ReplayPlan, overrides: dict[str, Any]) -> dict[str, Any]:
    """The PersistentKernel parameters of a replay: the saved ones, the saved meta tensor overrides
    (moved to where the kernel will run), then the caller's ``overrides``."""
    init = {**plan.init_params, "target_cc": plan.target_cc, **overrides}
    if plan.output.meta and "meta_tensors" not in overrides:
        cpu = init.get("emulate") or init.get("compile_only") or not torch.cuda.is_available()
        device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
        init["meta_tensors"] = {k: v.to(device) for k, v in plan.output.meta.items()}
    return init


def check_kernel(out: CompileOutput, arch: str, num_workers: int) -> None:
    """ConfigError unless a kernel of ``arch`` with ``num_workers`` can run the saved graph."""
    if arch != out.signature.arch:
        raise ConfigError(f"{out.directory} was generated for {out.signature.arch}; replay it with that target_cc, not {arch}")
    if num_workers != out.graph.schedule.num_workers:
        raise ConfigError(
            f"{out.directory} was scheduled for num_workers={out.graph.schedule.num_workers}; "
            f"replay it with the same num_workers, not {num_workers}"
        )


def plan(output_dir: str | Path, rank: int) -> ReplayPlan:
    out = read(output_dir, rank)
    sig = out.signature
    init = dict(sig.params)
    return ReplayPlan(out, init, int(sig.arch[2:]))


def bind(out: CompileOutput, tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of the signature by name: the caller's, derived ones recomputed as the original
    run did (shuffle_tensors), intermediates allocated here. ShapeError / GraphError otherwise."""
    wanted = {t.name: t for t in out.signature.tensors}
    bound = dict(tensors)
    for st in out.signature.tensors:
        recipe = st.derived_from
        if recipe and st.name not in bound and all(i in bound for i in recipe.get("inputs", ())):
            bound[st.name] = shuffle([bound[i] for i in recipe["inputs"]], recipe["shuffled_dim"], recipe["num_groups"])
        elif st.kind == "intermediate" and st.name not in bound:
            bound[st.name] = torch.empty(st.shape, dtype=dtypes.from_short(st.dtype).torch, device=device)
    unknown = sorted(set(bound) - set(wanted))
    missing = sorted(set(wanted) - set(bound))
    if unknown or missing:
        raise GraphError(
            f"replay of {out.directory}: tensors must match its signature; missing {missing or 'none'}, "
            f"unknown {unknown or 'none'}"
        )
    for name, want in wanted.items():
        given = bound[name]
        if list(given.shape) != list(want.shape) or dtypes.lookup(given.dtype).short != want.dtype:
            raise ShapeError(
                f"replay of {out.directory}: tensor {name!r} must be {want.dtype} {tuple(want.shape)}, "
                f"got {dtypes.lookup(given.dtype).short} {tuple(given.shape)}"
            )
    return {name: bound[name] for name in wanted}
