"""MoE down projection and weighted sum in one layer: each task owns a slice of the hidden columns
and streams those rows of every routed expert, summing each token's experts itself."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..errors import DTypeError, ShapeError
from .moe_experts import TENSOR_CORE, UNIT_ROWS, ReadsRouting, check_slots
from .registry import Arg, EmulationContext, SliceInfo, register_task, split, whole

WARPS = 8  # the most warps a worker has (csrc/runtime/config.cuh): each keeps its own sums
SMEM_LIMIT = 128 * 1024  # bytes of shared memory the sums may take: within sm80's 163 KB a block, with room to spare


def smem_bytes(tokens: int, experts: int, columns: int) -> int:
    """moe_w2_mul_sum_add_smem_bytes at 8 warps: the experts with tokens, then per warp its sums
    (tokens x (columns + 1)), token list and weights (tokens each), 4 bytes a word."""
    return (experts + WARPS * (tokens * (columns + 1) + 2 * tokens)) * 4


def column_slices(hidden: int, workers: int) -> int | None:
    """The layer's grid for `hidden` columns on `workers` workers: the most slices of a multiple of 16
    columns, at most one a worker (2048 columns on 131 workers: 128); None when hidden is not a
    multiple of 16."""
    units = hidden // UNIT_ROWS
    if hidden % UNIT_ROWS or units == 0:
        return None
    return max(d for d in range(1, min(workers, units) + 1) if units % d == 0)


@register_task
class MoeW2MulSumAdd(ReadsRouting):
    name = "moe_w2_mul_sum_add"
    inputs = {
        "input": whole(),
        "weight": split(x=1),
        "routing_indices": whole(),
        "expert_mask": whole(),
        "topk_weights": whole(),
        "residual": split(x=1),
    }
    outputs = {"output": split(x=1)}
    token_dims = {"input": 0, "routing_indices": 1, "topk_weights": 0, "residual": 0, "output": 0}
    headers = {arch: "common/moe_w2_mul_sum_add.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_w2_mul_sum_add"
    smem_function = "mpk::tasks::moe_w2_mul_sum_add_smem_bytes"
    reference = "moe_w2_mul_sum_add"
    # Runtime::mark in the body.
    phases = (
        "experts with tokens listed, residual requested",
        "units: token lists, weights, sums",
        "residual added, rows written",
    )
    doc = """moe_w2_linear and moe_mul_sum_add in one layer: output[t] = residual[t] + sum_j
    topk_weights[t, j] * input[t, j] @ weight[e_j].T over token t's k experts e_j, in fp32 with one
    rounding. input (tokens, k, I) (the experts' activations, from the gate / up layer); weight
    (E, H, I); routing_indices (E, tokens), expert_mask (E + 1,) and topk_weights (tokens, k)
    float32 from moe_topk_softmax_routing; residual and output (tokens, H). No (tokens, k, H)
    intermediate, no combine layer and no dependency hop between the two.

    grid_dim=(T, 1, 1): T cuts H into T slices of a multiple of 16 columns, and each task streams
    its columns' rows of every expert that has tokens (so the tasks' shares are equal whatever the
    routing): use the largest T up to the worker count that divides H / 16 (2048 / 16 = 128 tasks).
    Every task keeps fp32 sums of its columns for the batch in shared memory, so it takes batches of
    decode size (an error names the limit); above it use moe_w2_linear and moe_mul_sum_add. Rows of
    inactive tokens are not written."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, w = args["input"].tensor, args["weight"].tensor
        r, m, tw = args["routing_indices"].tensor, args["expert_mask"].tensor, args["topk_weights"].tensor
        res, y = args["residual"].tensor, args["output"].tensor
        if x.num_dims != 3 or w.num_dims != 3 or x.shape[2] != w.shape[2]:
            raise ShapeError(
                f"{self.name}: input must be (tokens, k, I) and weight (experts, H, I) with the same I; got {x.shape}, {w.shape}"
            )
        tokens, k, inter = x.shape
        experts, hidden = w.shape[0], w.shape[1]
        if r.shape != (experts, tokens) or m.shape != (experts + 1,) or tw.shape != (tokens, k):
            raise ShapeError(
                f"{self.name}: routing_indices must be (experts, tokens) = {(experts, tokens)}, expert_mask "
                f"({experts + 1},) and topk_weights (tokens, k) = {(tokens, k)} (from moe_topk_softmax_routing); "
                f"got {r.shape}, {m.shape}, {tw.shape}"
            )
        if res.shape != (tokens, hidden) or y.shape != (tokens, hidden):
            raise ShapeError(
                f"{self.name}: residual and output must be (tokens, H) = {(tokens, hidden)}; got {res.shape}, {y.shape}"
            )
        if inter % 32:
            raise ShapeError(f"{self.name}: weight {w.shape}: I = {inter} must be a multiple of 32 (tensor-core k-blocks)")
        if hidden % (UNIT_ROWS * grid[0]):
            raise ShapeError(
                f"{self.name}: grid x = {grid[0]} tasks must cut H = {hidden} into slices of a multiple of {UNIT_ROWS} "
                f"columns; use a divisor of {hidden // UNIT_ROWS}"
            )
        for arg, t in (("input", x), ("weight", w), ("residual", res), ("output", y)):
            if t.dtype.torch not in TENSOR_CORE or t.dtype is not x.dtype:
                raise DTypeError(f"{self.name}: {arg} ({t!r}) must be bfloat16 or float16, like input")
        for arg, t in (("routing_indices", r), ("expert_mask", m)):
            if t.dtype.torch != torch.int32:
                raise DTypeError(f"{self.name}: {arg} ({t!r}) must be int32")
        if tw.dtype.torch != torch.float32:
            raise DTypeError(f"{self.name}: topk_weights ({tw!r}) must be float32")
        columns = hidden // grid[0]
        need = smem_bytes(tokens, experts, columns)
        if need > SMEM_LIMIT:
            raise ShapeError(
                f"{self.name}: {tokens} token rows x {columns} columns a task need {need} bytes of sums in shared "
                f"memory, more than {SMEM_LIMIT}: use more tasks (narrower slices), or moe_w2_linear and "
                f"moe_mul_sum_add for batches this large"
            )

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        x, y = s["input"], s["output"]
        tokens, k, inter = x.full_shape
        experts = s["weight"].full_shape[0]
        return [x.dtype.cpp, tokens, experts, k, inter, y.shape[1], y.full_shape[1]]

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        from . import references

        check_slots(inputs["routing_indices"], inputs["input"].shape[1])
        outputs["output"].copy_(references.find(self.reference)(**inputs))
