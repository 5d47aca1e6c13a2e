"""SiLU-and-multiply of an MoE block's (token, slot) rows of [gate | up]."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, split, whole


@register_task
class MoeSiluMul(TaskSpec):
    name = "moe_silu_mul"
    inputs = {"input": whole()}
    outputs = {"output": split(x=2)}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: "common/moe_silu_mul.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_silu_mul"
    reference = "moe_silu_mul"
    doc = """output = silu(gate) * up, in fp32, for the rows (token, slot) of the active tokens.
    input (tokens, k, 2 * I) is [gate | up] per row, as moe_w13_linear writes it (not grouped, so
    unlike silu_mul it needs no shuffled weights); output (tokens, k, I); grid x cuts I into equal
    column slices. Rows of inactive tokens are not written (silu_mul would treat all tokens * k rows
    as live, which is why this is its own task). moe_w13_linear with an (tokens, k, I) output fuses
    the same math into its epilogue."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, y = args["input"].tensor, args["output"].tensor
        if x.num_dims != 3 or y.num_dims != 3 or x.shape[:2] != y.shape[:2] or x.shape[2] != 2 * y.shape[2]:
            raise ShapeError(
                f"moe_silu_mul: input must be (tokens, k, 2 * I) and output (tokens, k, I); got {x.shape}, {y.shape}"
            )
        for arg, t in (("input", x), ("output", y)):
            if t.dtype.torch not in FLOATING or t.dtype is not x.dtype:
                raise DTypeError(f"moe_silu_mul: {arg} ({t!r}) must be bfloat16, float16 or float32, like input")

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        _, k, cols = s["output"].shape
        return [s["input"].dtype.cpp, k, cols, s["output"].full_shape[2]]

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        return [s["input"].full_shape[0]]  # the token rows: for active_rows

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        from . import references

        y = outputs["output"]
        cols, inter = y.shape[2], inputs["input"].shape[2] // 2
        c0 = ctx.grid_idx[0] * cols
        x = inputs["input"]
        gate_up = torch.cat([x[..., c0 : c0 + cols], x[..., inter + c0 : inter + c0 + cols]], dim=2)
        y.copy_(references.find(self.name)(gate_up))
