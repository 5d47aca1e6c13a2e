"""All-gather across the ranks (one GPU each) of a host: every rank's input side by side, on every
rank. A cross-rank task, moved as the all-reduce moves its data (csrc/tasks/common/allgather.cuh).
With ``rank_offset``, integer elements from rank q get q * rank_offset added: the greedy sampler of a
vocabulary-parallel head gathers its shards' local token indices as global ones."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .. import archs
from ..errors import DTypeError, ShapeError
from . import peer_exchange
from .registry import Arg, EmulationContext, SliceInfo, register_task, selected, split

TILE = split(x=1, y=0)


@register_task
class AllGather(peer_exchange.PeerExchangeTask):
    name = "allgather"
    inputs = {"input": TILE}
    outputs = {"output": selected(x=1, y=0), "buffer": selected(x=3, y=2)}
    scalars = {"rank_offset": 0}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: "common/allgather.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::allgather"
    reference = "allgather"
    cross_rank = True
    doc = """output[:, q * width + c] = rank q's input[:, c] (+ q * rank_offset, integer tensors only), on
    every rank: input is (batch, width), output (batch, world_size * width). grid x splits width and
    grid y the rows. buffer is the layer's own communication buffer:
    pk.new_comm_tensor((2, pk.world_size, batch, width), dtype, name)."""

    def signature(self) -> inspect.Signature:
        P = inspect.Parameter
        return inspect.Signature(
            [P("self", P.POSITIONAL_OR_KEYWORD)]
            + [P(n, P.POSITIONAL_OR_KEYWORD) for n in ("input", "buffer", "output")]
            + [P("grid_dim", P.KEYWORD_ONLY), P("block_dim", P.KEYWORD_ONLY), P("rank_offset", P.KEYWORD_ONLY, default=0)]
        )

    def bind(self, kwargs: dict[str, Any]) -> tuple[list[Arg], dict[str, Any]]:
        args = [Arg("input", kwargs.pop("input"), TILE, False)]
        args += [Arg("output", kwargs.pop("output"), self.outputs["output"], True)]
        args += [Arg("buffer", kwargs.pop("buffer"), self.outputs["buffer"], True)]
        return args, kwargs

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, y, buf = args["input"].tensor, args["output"].tensor, args["buffer"].tensor
        if x.num_dims != 2:
            raise ShapeError(f"allgather: input must be (batch, width), got {x!r}")
        world = peer_exchange.check_buffer("allgather", "all-gather", x, buf)
        if y.shape != (x.shape[0], world * x.shape[1]) or y.dtype is not x.dtype:
            raise ShapeError(f"allgather: output must be {x.dtype.short} of shape {(x.shape[0], world * x.shape[1])}, got {y!r}")
        offset = values["rank_offset"]
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < 2**31:
            raise DTypeError(f"allgather: rank_offset={offset!r} must be an integer in [0, 2**31)")
        if offset and x.dtype.torch.is_floating_point:
            raise DTypeError(f"allgather: rank_offset applies to integer tensors (indices), not {x.dtype.short}")
        peer_exchange.check_vector_slices("allgather", x, grid)

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        rows, cols = s["input"].shape
        batch, width = s["input"].full_shape
        return [s["input"].dtype.cpp, rows, cols, batch, width, "true" if values["rank_offset"] else "false"]

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        return [int(values["rank_offset"])]

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        buf, y = outputs["buffer"], outputs["output"]
        rows, cols, parts = peer_exchange.parts(inputs["input"], buf, ctx)
        width = buf.shape[3]
        for q, part in enumerate(parts):
            y[rows, q * width + cols.start : q * width + cols.stop].copy_(
                part + q * values["rank_offset"] if values["rank_offset"] else part
            )
