"""MoE routing: top-k of the router logits, softmax over the kept k, and expert-major routing data."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, whole

MAX_EXPERTS = 1024  # a lane keeps E / 32 logits in registers
MAX_TOPK = 32  # a lane keeps one kept logit


@register_task
class MoeTopkSoftmaxRouting(TaskSpec):
    name = "moe_topk_softmax_routing"
    inputs = {"input": whole()}
    outputs = {"topk_weights": whole(), "routing_indices": whole(), "expert_mask": whole()}
    token_dims = {"input": 0, "topk_weights": 0, "routing_indices": 1}
    headers = {arch: "common/moe_routing.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_topk_softmax_routing"
    smem_function = "mpk::tasks::moe_routing_smem_bytes"
    reference = "moe_topk_softmax_routing"
    doc = """Routing of a mixture-of-experts block. input: router logits (tokens, E), float32,
    bfloat16 or float16. For every active token: topk_weights (tokens, k) float32 gets the softmax
    of its k largest logits, largest first (k = topk_weights' second dim; Qwen3's softmax over all E,
    top k, renormalized, is the same numbers); routing_indices (E, tokens) int32 gets, expert-major,
    j + 1 where expert e is the token's j-th choice and 0 elsewhere; expert_mask (E + 1,) int32 gets
    the prefix count of routed tokens: expert_mask[e] = tokens routed to experts below e, so expert e
    has expert_mask[e + 1] - expert_mask[e] tokens and expert_mask[E] = tokens * k.

    Ties: equal logits are taken lower expert index first (so all-equal logits pick experts 0..k-1);
    NaN counts as -inf. Columns of inactive tokens (past the iteration's active tokens along a
    dimension of max_num_batched_tokens) are not written. One task: grid_dim=(1, 1, 1)."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, w = args["input"].tensor, args["topk_weights"].tensor
        if x.num_dims != 2:
            raise ShapeError(f"moe_topk_softmax_routing: input must be router logits (tokens, experts), got {x.shape}")
        tokens, experts = x.shape
        if w.num_dims != 2 or w.shape[0] != tokens:
            raise ShapeError(f"moe_topk_softmax_routing: topk_weights must be (tokens, k) = ({tokens}, k), got {w.shape}")
        k = w.shape[1]
        if not 1 <= k <= min(experts, MAX_TOPK) or experts > MAX_EXPERTS:
            raise ShapeError(
                f"moe_topk_softmax_routing: k={k} experts per token out of E={experts}; the task takes "
                f"1 <= k <= min(E, {MAX_TOPK}) and E <= {MAX_EXPERTS}"
            )
        check_routing_outputs(self.name, args, tokens, experts)

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        return [s["input"].dtype.cpp, s["input"].shape[1], s["topk_weights"].shape[1]]

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        return [s["input"].full_shape[0]]  # the token rows: routing's row stride, and for active_rows

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        tokens, experts = s["input"].shape
        return 2000.0 + tokens * s["topk_weights"].shape[1] * 25.0 + tokens * experts / 8.0

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        from . import references

        k = outputs["topk_weights"].shape[1]
        weights, routing, mask = references.find(self.name)(inputs["input"], k)
        outputs["topk_weights"].copy_(weights)
        outputs["routing_indices"].copy_(routing)
        outputs["expert_mask"].copy_(mask)


def check_routing_outputs(task: str, args: dict[str, Arg], tokens: int, experts: int) -> None:
    """What a routing layer (this one, moe_sigmoid_group_routing) writes, and its logits' dtype:
    routing_indices (E, tokens) and expert_mask (E + 1,) int32, topk_weights float32."""
    x, w = args["input"].tensor, args["topk_weights"].tensor
    r, m = args["routing_indices"].tensor, args["expert_mask"].tensor
    if r.shape != (experts, tokens):
        raise ShapeError(f"{task}: routing_indices must be (experts, tokens) = {(experts, tokens)}, got {r.shape}")
    if m.shape != (experts + 1,):
        raise ShapeError(f"{task}: expert_mask must be (experts + 1,) = ({experts + 1},), got {m.shape}")
    if x.dtype.torch not in FLOATING:
        raise DTypeError(f"{task}: input ({x!r}) must be float32, bfloat16 or float16")
    for arg, t, want in (
        ("topk_weights", w, torch.float32),
        ("routing_indices", r, torch.int32),
        ("expert_mask", m, torch.int32),
    ):
        if t.dtype.torch != want:
            raise DTypeError(f"{task}: {arg} ({t!r}) must be {want}")
