"""All-reduce across the ranks (one GPU each) of a host: the sum over ranks, plus an optional residual.

A cross-rank task: every rank runs the same graph, and the task for a slice meets the same task
on every other rank (see csrc/tasks/common/allreduce.cuh for the one-shot push it runs and
csrc/runtime/comm.cuh for the signals between ranks)."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .. import archs, contract
from ..dtypes import FLOATING
from ..errors import GraphError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, selected, split

TILE = split(x=1, y=0)  # grid x splits the hidden dimension, grid y the rows


@register_task
class AllReduce(TaskSpec):
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
        world = getattr(buf, "comm_world_size", None)
        if buf.kind != "comm" or world is None:
            raise GraphError(
                f"allreduce: buffer ({buf!r}) must be a communication tensor, which the other ranks can reach: "
                f"buffer = pk.new_comm_tensor((2, pk.world_size, {x.shape[0]}, {x.shape[1]}), {x.dtype.torch}, name)"
            )
        want = (2, world, *x.shape)
        if buf.shape != want or buf.dtype is not x.dtype:
            raise ShapeError(
                f"allreduce: buffer must be {x.dtype.short} of shape {want} (2, world_size, batch, hidden), got {buf!r}"
            )
        if buf.read or buf.written:
            raise GraphError(
                f"allreduce: buffer {buf.name!r} is already used by another layer; every all-reduce layer needs its own "
                f"buffer (a rank may write the next layer's data before its peers have read this one's)"
            )
        if world > contract.MAX_RANKS:
            raise ShapeError(f"allreduce: {world} ranks; the runtime supports at most {contract.MAX_RANKS}")
        cols = x.shape[1] // grid[0] if x.shape[1] % grid[0] == 0 else 0
        if cols * x.dtype.itemsize % 16:
            raise ShapeError(
                f"allreduce: grid x = {grid[0]} gives slices of {x.shape[1] / grid[0]:g} columns; each slice row "
                f"must be whole 16-byte vectors ({16 // x.dtype.itemsize} {x.dtype.short} elements)"
            )

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        rows, cols = s["input"].shape
        batch, hidden = s["input"].full_shape
        return [s["input"].dtype.cpp, rows, cols, batch, hidden, "true" if "residual" in s else "false"]

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        return 2000.0 + s["input"].nbytes / 10.0  # a link round trip, then the slice over NVLink

    def emulate_send(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        x = inputs["input"]
        rows, cols = self._place(x, outputs["buffer"], ctx)
        for q, peer in enumerate(ctx.peers or []):
            if q != ctx.rank:
                peer["buffer"][self._parity(ctx), ctx.rank, rows, cols].copy_(x)

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        from . import references

        x, buf = inputs["input"], outputs["buffer"]
        rows, cols = self._place(x, buf, ctx)
        parts = [x if q == ctx.rank else buf[self._parity(ctx), q, rows, cols] for q in range(ctx.world_size)]
        outputs["output"].copy_(references.find("allreduce")(parts, inputs.get("residual")))

    @staticmethod
    def _parity(ctx: EmulationContext) -> int:
        return (ctx.iteration + 1) % 2  # the buffer's generation: the device's epoch % 2

    @staticmethod
    def _place(x: torch.Tensor, buf: torch.Tensor, ctx: EmulationContext) -> tuple[slice, slice]:
        """The rows and columns of the buffer's (batch, hidden) planes that this task's slice covers
        (its live rows only, as ``x`` holds them)."""
        batch, hidden = buf.shape[2:]
        r0 = ctx.grid_idx[1] * (batch // ctx.grid[1])
        c0 = ctx.grid_idx[0] * (hidden // ctx.grid[0])
        return slice(r0, r0 + x.shape[0]), slice(c0, c0 + x.shape[1])
