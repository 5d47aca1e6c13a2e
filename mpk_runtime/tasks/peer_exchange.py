"""What the tasks that exchange slices with their peer ranks share (allreduce, allgather): the
checks of their communication buffer and slices, and how their emulation places a slice in the
buffer and sends it to the peers.

The buffer is ``(2, world_size, batch, width)`` in the communication heap: plane ``[g, r]`` holds
rank r's slices of generation g (the device's epoch % 2), so a rank may write the next launch's
data while a slow peer still reads this one's.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import contract
from ..errors import GraphError, ShapeError
from .spec import EmulationContext, SliceInfo, TaskSpec


def check_buffer(task: str, layer_kind: str, x: Any, buf: Any) -> int:
    """The world size of ``buf``, a communication tensor for the slices of ``x`` that no other layer
    uses; GraphError / ShapeError naming ``task`` otherwise. ``layer_kind`` names the layer in words."""
    world = getattr(buf, "comm_world_size", None)
    if buf.kind != "comm" or world is None:
        raise GraphError(
            f"{task}: buffer ({buf!r}) must be a communication tensor, which the other ranks can reach: "
            f"buffer = pk.new_comm_tensor((2, pk.world_size, {x.shape[0]}, {x.shape[1]}), {x.dtype.torch}, name)"
        )
    want = (2, world, *x.shape)
    if buf.shape != want or buf.dtype is not x.dtype:
        raise ShapeError(f"{task}: buffer must be {x.dtype.short} of shape {want} (2, world_size, batch, width), got {buf!r}")
    if buf.read or buf.written:
        raise GraphError(
            f"{task}: buffer {buf.name!r} is already used by another layer; every {layer_kind} layer needs its own "
            f"buffer (a rank may write the next layer's data before its peers have read this one's)"
        )
    if world > contract.MAX_RANKS:
        raise ShapeError(f"{task}: {world} ranks; the runtime supports at most {contract.MAX_RANKS}")
    return world


def check_vector_slices(task: str, x: Any, grid: tuple[int, int, int]) -> None:
    """ShapeError unless grid x cuts the rows of ``x`` into whole 16-byte vectors (the exchange's unit)."""
    cols = x.shape[1] // grid[0] if x.shape[1] % grid[0] == 0 else 0
    if cols * x.dtype.itemsize % 16:
        raise ShapeError(
            f"{task}: grid x = {grid[0]} gives slices of {x.shape[1] / grid[0]:g} columns; each slice row "
            f"must be whole 16-byte vectors ({16 // x.dtype.itemsize} {x.dtype.short} elements)"
        )


def parity(ctx: EmulationContext) -> int:
    """The buffer's generation this iteration writes: the device's epoch % 2."""
    return (ctx.iteration + 1) % 2


def place(x: torch.Tensor, buf: torch.Tensor, ctx: EmulationContext) -> tuple[slice, slice]:
    """The rows and columns of the buffer's (batch, width) planes that this task's slice covers
    (its live rows only, as ``x`` holds them)."""
    batch, width = buf.shape[2:]
    r0 = ctx.grid_idx[1] * (batch // ctx.grid[1])
    c0 = ctx.grid_idx[0] * (width // ctx.grid[0])
    return slice(r0, r0 + x.shape[0]), slice(c0, c0 + x.shape[1])


def parts(x: torch.Tensor, buf: torch.Tensor, ctx: EmulationContext) -> tuple[slice, slice, list[torch.Tensor]]:
    """The buffer rows and columns of this task's slice, and every rank's slice there, by rank
    (this rank's own from ``x``, the peers' from the buffer)."""
    rows, cols = place(x, buf, ctx)
    return rows, cols, [x if q == ctx.rank else buf[parity(ctx), q, rows, cols] for q in range(ctx.world_size)]


class PeerExchangeTask(TaskSpec):
    """The part of a peer-exchanging task's spec that does not depend on what it makes of the
    peers' slices: its cost, and its emulated send (the slice ``input`` into every peer's ``buffer``)."""

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        return 2000.0 + s["input"].nbytes / 10.0  # a link round trip, then the slice over NVLink

    def emulate_send(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        send(inputs["input"], outputs["buffer"], ctx)


def send(x: torch.Tensor, buf: torch.Tensor, ctx: EmulationContext) -> None:
    """Store this task's slice ``x`` into every peer's buffer, in this rank's plane."""
    rows, cols = place(x, buf, ctx)
    for q, peer in enumerate(ctx.peers or []):
        if q != ctx.rank:
            peer["buffer"][parity(ctx), ctx.rank, rows, cols].copy_(x)
