"""Greedy sampling, step 1: per row, the largest logit of each task's vocabulary chunk."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, split


@register_task
class ArgmaxPartial(TaskSpec):
    name = "argmax_partial"
    inputs = {"input": split(x=1)}
    outputs = {"values": split(x=1), "indices": split(x=1)}
    token_dims = {"input": 0, "values": 0, "indices": 0}
    headers = {arch: "common/argmax.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::argmax_partial"
    reference = "argmax_partial"
    doc = """For logits input (batch, vocab) cut into grid-x chunks: values (batch, parts) float32
    and indices (batch, parts) int64 get each chunk's largest logit and its (global) index, with
    parts = grid x. Ties resolve to the lowest index; NaN counts as the largest (torch.argmax)."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, v, i = args["input"].tensor, args["values"].tensor, args["indices"].tensor
        parts = grid[0]
        if x.num_dims != 2 or x.dtype.torch not in FLOATING:
            raise ShapeError(f"argmax_partial: input must be float logits (batch, vocab), got {x!r}")
        if v.shape != (x.shape[0], parts) or i.shape != (x.shape[0], parts):
            raise ShapeError(
                f"argmax_partial: values and indices must be (batch, grid x) = ({x.shape[0]}, {parts}); "
                f"got {v.shape} and {i.shape}"
            )
        if v.dtype.torch != torch.float32 or i.dtype.torch != torch.int64:
            raise DTypeError(f"argmax_partial: values must be float32 and indices int64; got {v.dtype.short}, {i.dtype.short}")

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        batch, cols = s["input"].shape
        return [s["input"].dtype.cpp, batch, cols, s["input"].full_shape[1], s["values"].full_shape[1]]

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        from . import references

        v, i = references.find("argmax_partial")(inputs["input"], num_parts=1)
        outputs["values"].copy_(v)
        # Global indices: the task's chunk starts at column grid x * its width (the grid divides the
        # vocabulary). Not from the view's storage offset, which also counts where the whole tensor
        # starts in its storage (a view of a larger buffer).
        outputs["indices"].copy_(i + ctx.grid_idx[0] * inputs["input"].shape[1])
