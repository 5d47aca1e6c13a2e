"""The no-op task: measures the runtime itself, and (probe=True) verifies dependency order."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..errors import DTypeError, GraphError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, split

PARTITION = split(x=0)


@register_task
class Noop(TaskSpec):
    name = "noop"
    options = {"probe": False}
    headers = {arch: "common/noop.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::noop"
    doc = """Tasks that do nothing but depend on their inputs and produce their outputs.

    ``inputs`` (up to 7) and ``outputs`` (up to 3) are split along dim 0 by grid x, so a layer with
    grid (N, 1, 1) over tensors of N rows makes N independent tasks, and layers chained through
    their tensors make dependent ones. With ``probe=True`` (int32 tensors) every task writes its
    depth in the graph, 1 + the largest input element (INT32_MIN if an input was unwritten), so a
    test can check on the device that each task ran after its producers."""

    def bind(self, kwargs: dict[str, Any]) -> tuple[list[Arg], dict[str, Any]]:
        for key in ("inputs", "outputs"):
            if not isinstance(kwargs[key], (list, tuple)):
                raise GraphError(f"noop_layer(): {key}={kwargs[key]!r} must be a list of tensors, e.g. {key}=[t]")
        ins, outs = list(kwargs.pop("inputs")), list(kwargs.pop("outputs"))
        args = [Arg(f"inputs[{i}]", t, PARTITION, False) for i, t in enumerate(ins)]
        args += [Arg(f"outputs[{i}]", t, PARTITION, True) for i, t in enumerate(outs)]
        return args, kwargs

    def allows_in_place(self, output: str, input: str) -> bool:
        return True  # one partition for every slice, and a task reads its inputs before it writes

    def signature(self):
        import inspect

        P = inspect.Parameter
        return inspect.Signature(
            [
                P("self", P.POSITIONAL_OR_KEYWORD),
                P("inputs", P.POSITIONAL_OR_KEYWORD),
                P("outputs", P.POSITIONAL_OR_KEYWORD),
                P("grid_dim", P.KEYWORD_ONLY),
                P("block_dim", P.KEYWORD_ONLY),
                P("probe", P.KEYWORD_ONLY, default=False),
            ]
        )

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        if not any(a.writes for a in args.values()):
            raise ShapeError("noop: give at least one output tensor; a task without outputs is invisible to its consumers")
        if not isinstance(values["probe"], bool):
            raise DTypeError(f"noop: probe={values['probe']!r} must be True or False")
        if values["probe"]:
            for a in args.values():
                if a.tensor.dtype.torch != torch.int32:
                    raise DTypeError(f"noop(probe=True): {a.name} ({a.tensor!r}) must be int32; probes write depths")

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        ins = [i for n, i in s.items() if n.startswith("inputs")]
        outs = [i for n, i in s.items() if n.startswith("outputs")]
        if values["probe"]:
            for group, what in ((ins, "input"), (outs, "output")):
                if len({i.numel for i in group}) > 1:
                    sizes = ", ".join(f"{i.name}: {i.numel}" for i in group)
                    raise ShapeError(f"noop(probe=True): every {what} slice must have the same size; got {sizes}")
        in_len = ins[0].numel if ins and values["probe"] else 0
        out_len = outs[0].numel if outs and values["probe"] else 0
        return [len(ins), in_len, len(outs), out_len, "true" if values["probe"] else "false"]

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        return 50.0

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        if not values["probe"]:
            return
        ins = list(inputs.values())
        unwritten = any(bool((t < 1).any()) for t in ins)
        depth = torch.iinfo(torch.int32).min if unwritten else 1 + max((int(t.max()) for t in ins), default=0)
        for t in outputs.values():
            t.fill_(depth)
