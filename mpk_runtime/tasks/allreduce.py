"""All-reduce across the ranks (one GPU each) of a host: the sum over ranks, plus an optional residual.

A cross-rank task: every rank runs the same graph, and the task for a slice meets the same task
on every other rank (see csrc/tasks/common/allreduce.cuh for the one-shot push it runs and
csrc/runtime/comm.cuh for the signals between ranks)."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .. import archs
from ..dtypes import FLOATING
from ..errors import ShapeError
from . import peer_exchange
from .registry import Arg, EmulationContext, SliceInfo, register_task, selected, split

TILE = split(x=1, y=0)  # grid x splits the hidden dimension, grid y the rows


@register_task
class AllReduce(peer_exchange.PeerExchangeTask):
    name = "allreduce"
    inputs = {"input": TILE, "residual": TILE}
    outputs = {"output": TILE, "buffer": selected(x=3, y=2)}
    token_dims = {"input": 0, "residual": 0, "output": 0}
    headers = {arch: "common/allreduce.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::allreduce"
    reference = "allreduce"
    cross_rank = True
    doc = """output = the sum over every rank of its input (+ residual), in fp32 summed in rank order,
    rounded once: the same bits on every rank. input, residual and output are (batch, hidden); grid x
    splits hidden and grid y the rows, and each task waits only for its own slice on the other ranks,
    so the next layer's tasks start as soon as their slice is reduced. buffer is the layer's own
    communication buffer: buffer = pk.new_comm_tensor((2, pk.world_size, batch, hidden), dtype, name).
    With world_size 1 the layer is a copy (plus the residual)."""

    def bind(self, kwargs: dict[str, Any]) -> tuple[list[Arg], dict[str, Any]]:
        residual = kwargs.pop("residual", None)
        args = [Arg("input", kwargs.pop("input"), TILE, False)]
        if residual is not None:
            args.append(Arg("residual", residual, TILE, False))
        args += [
            Arg("output", kwargs.pop("output"), TILE, True),
            Arg("buffer", kwargs.pop("buffer"), self.outputs["buffer"], True),
        ]
        return args, kwargs

    def signature(self) -> inspect.Signature:
        P = inspect.Parameter
        return inspect.Signature(
            [P("self", P.POSITIONAL_OR_KEYWORD)]
            + [P(n, P.POSITIONAL_OR_KEYWORD) for n in ("input", "buffer", "output")]
            + [P("residual", P.POSITIONAL_OR_KEYWORD, default=None)]
            + [P("grid_dim", P.KEYWORD_ONLY), P("block_dim", P.KEYWORD_ONLY)]
        )

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, y, buf = args["input"].tensor, args["output"].tensor, args["buffer"].tensor
        if x.num_dims != 2 or x.dtype.torch not in FLOATING:
            raise ShapeError(f"allreduce: input must be a (batch, hidden) float tensor, got {x!r}")
        named = [("output", y)] + ([("residual", args["residual"].tensor)] if "residual" in args else [])
        for name, t in named:
            if t.shape != x.shape or t.dtype is not x.dtype:
                raise ShapeError(f"allreduce: {name} must have input's shape {x.shape} and dtype {x.dtype.short}, got {t!r}")
        peer_exchange.check_buffer("allreduce", "all-reduce", x, buf)
        peer_exchange.check_vector_slices("allreduce", x, grid)

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        rows, cols = s["input"].shape
        batch, hidden = s["input"].full_shape
        return [s["input"].dtype.cpp, rows, cols, batch, hidden, "true" if "residual" in s else "false"]

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        from . import references

        _, _, parts = peer_exchange.parts(inputs["input"], outputs["buffer"], ctx)
        outputs["output"].copy_(references.find("allreduce")(parts, inputs.get("residual")))
