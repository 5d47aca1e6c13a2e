"""The combine step of an MoE block: each token's k expert outputs, weighted, summed, plus the residual."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, SliceInfo, TaskSpec, register_task, split, whole


@register_task
class MoeMulSumAdd(TaskSpec):
    name = "moe_mul_sum_add"
    inputs = {"input": split(x=2), "topk_weights": whole(), "residual": split(x=1)}
    outputs = {"output": split(x=1)}
    token_dims = {"input": 0, "topk_weights": 0, "residual": 0, "output": 0}
    headers = {arch: "common/moe_mul_sum_add.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_mul_sum_add"
    reference = "moe_mul_sum_add"
    doc = """output[t] = sum_j topk_weights[t, j] * input[t, j] + residual[t], in fp32, for the active
    tokens. input (tokens, k, H) from moe_w2_linear (row j: the token's j-th expert), topk_weights
    (tokens, k) float32 from moe_topk_softmax_routing, residual and output (tokens, H); grid x cuts H
    into equal column slices. Rows of inactive tokens are not written."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, w = args["input"].tensor, args["topk_weights"].tensor
        r, y = args["residual"].tensor, args["output"].tensor
        if x.num_dims != 3 or w.shape != x.shape[:2] or r.shape != (x.shape[0], x.shape[2]) or y.shape != r.shape:
            raise ShapeError(
                f"moe_mul_sum_add: input must be (tokens, k, H), topk_weights (tokens, k), residual and output "
                f"(tokens, H); got {x.shape}, {w.shape}, {r.shape}, {y.shape}"
            )
        if w.dtype.torch != torch.float32:
            raise DTypeError(f"moe_mul_sum_add: topk_weights ({w!r}) must be float32")
        for arg, t in (("input", x), ("residual", r), ("output", y)):
            if t.dtype.torch not in FLOATING or t.dtype is not x.dtype:
                raise DTypeError(f"moe_mul_sum_add: {arg} ({t!r}) must be bfloat16, float16 or float32, like input")

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        _, k, cols = s["input"].shape
        return [s["input"].dtype.cpp, k, cols, s["input"].full_shape[2]]

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        return [s["input"].full_shape[0]]  # the token rows: for active_rows
