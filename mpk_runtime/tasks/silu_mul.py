"""SiLU-and-multiply over [gate | up] chunks: the activation of a gated MLP."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, split


@register_task
class SiluMul(TaskSpec):
    name = "silu_mul"
    inputs = {"input": split(x=1)}
    outputs = {"output": split(x=1)}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: "common/silu_mul.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::silu_mul"
    reference = "silu_mul"
    doc = """output = silu(gate) * up, in fp32. input is (batch, 2 * inter), output (batch, inter);
    grid x cuts both into equal column chunks, and each task's input chunk is [gate | up] (half
    each): the layout a gate/up linear produces when its weight was interleaved with
    pk.shuffle_tensors([w_gate, w_up], shuffled_dim=0, num_groups=grid x)."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, y = args["input"].tensor, args["output"].tensor
        if x.num_dims != 2 or y.num_dims != 2 or x.shape[1] != 2 * y.shape[1] or x.shape[0] != y.shape[0]:
            raise ShapeError(f"silu_mul: input must be (batch, 2 * inter) and output (batch, inter); got {x.shape}, {y.shape}")
        for arg, t in (("input", x), ("output", y)):
            if t.dtype.torch not in FLOATING or t.dtype is not x.dtype:
                raise DTypeError(f"silu_mul: {arg} ({t!r}) must be bfloat16, float16 or float32, like input")

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        batch, cols = s["output"].shape
        return [s["input"].dtype.cpp, batch, cols, s["input"].full_shape[1], s["output"].full_shape[1]]

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        # A task's slice is one [gate | up] group.
        from . import references

        outputs["output"].copy_(references.find("silu_mul")(inputs["input"], num_groups=1))
