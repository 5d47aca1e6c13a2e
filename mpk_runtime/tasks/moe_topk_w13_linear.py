"""MoE top-k routing and gate / up projection in one layer: each task routes the active tokens
itself from the router logits, then streams its share of the routed experts' w13 weights."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .moe_experts import ExpertLinear, emulate_units
from .moe_routing import MAX_EXPERTS, MAX_TOPK
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, selected, whole

# Every task keeps the routing slots of the whole batch in shared memory: E x (tokens | 1) ints.
MAX_SLOTS = 16384


@register_task
class MoeTopkW13Linear(ExpertLinear):
    name = "moe_topk_w13_linear"
    w13 = True
    inputs = {"input": whole(), "weight": whole(), "router_logits": whole()}
    outputs = {"output": selected(x=0)}
    token_dims = {"input": 0, "router_logits": 0, "output": 0}
    headers = {arch: "common/moe_topk_w13_linear.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_topk_w13_linear"
    smem_function = "mpk::tasks::moe_topk_w13_linear_smem_bytes"
    reference = "moe_topk_w13_linear"
    phases = ("routing: top-k of the logits, expert mask", *ExpertLinear.phases)
    routing_layer = "moe_topk_softmax_routing"  # the layer that routes this way alone, for batches too large
    doc = """moe_topk_softmax_routing's routing and moe_w13_linear's gate / up projection in one layer,
    for decode-sized batches. input (tokens, H); weight (E, 2 * I, H), each expert's gate rows then
    its up rows; router_logits (tokens, E), float32, bfloat16 or float16; output (tokens, k, 2 * I)
    ([gate | up]) or (tokens, k, I) (silu(gate) * up): row (t, j) for token t's j-th expert, chosen as
    moe_topk_softmax_routing chooses (largest logits, ties to the lower expert index, NaN as -inf).

    Each task routes every active token itself, in shared memory, so the expert weights start
    streaming without waiting for the routing layer and one dependency hop. Run
    moe_topk_softmax_routing on the same logits beside it (moe_w2_linear and moe_mul_sum_add need
    its routing_indices, expert_mask and topk_weights) and give this layer one task fewer than the
    workers, so that the routing task has a worker of its own. Needs E * (tokens | 1) <= 16384 (the
    slots in shared memory): above that use moe_topk_softmax_routing and moe_w13_linear.

    grid_dim=(T, 1, 1): the T tasks share the routed work evenly at run time (16-row units of the
    experts that have tokens). Rows of inactive tokens are not written."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        tokens, experts = self.check_streams(args, values, grid)
        logits, k = args["router_logits"].tensor, args["output"].tensor.shape[1]
        if logits.shape != (tokens, experts):
            raise ShapeError(
                f"{self.name}: router_logits must be (tokens, experts) = {(tokens, experts)} like input and weight; "
                f"got {logits.shape}"
            )
        if logits.dtype.torch not in FLOATING:
            raise DTypeError(f"{self.name}: router_logits ({logits!r}) must be float32, bfloat16 or float16")
        if not 1 <= k <= min(experts, MAX_TOPK) or experts > MAX_EXPERTS:
            raise ShapeError(
                f"{self.name}: k={k} experts per token (output's dim 1) out of E={experts}; the task takes "
                f"1 <= k <= min(E, {MAX_TOPK}) and E <= {MAX_EXPERTS}"
            )
        slots = experts * (tokens | 1)
        if slots > MAX_SLOTS:
            raise ShapeError(
                f"{self.name}: {experts} experts x {tokens} token rows need {slots} routing slots in shared memory, "
                f"more than {MAX_SLOTS}; use {self.routing_layer} and moe_w13_linear for batches this large"
            )

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        x, w, y = s["input"], s["weight"], s["output"]
        experts, n, k_in = w.full_shape
        logit = s["router_logits"].dtype.cpp
        return [x.dtype.cpp, logit, x.full_shape[0], experts, y.full_shape[1], k_in, n, y.full_shape[2]]

    def error_message(self, code: int, value: int, layer: Any, tensors: dict[str, Any]) -> str:
        # Its slots come from its own routing, not from a routing_indices input: the generic message.
        return TaskSpec.error_message(self, code, value, layer, tensors)

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        from . import references

        k = outputs["output"].shape[1]
        _, routing, mask = references.find("moe_topk_softmax_routing")(inputs["router_logits"], k)
        emulate_units(True, inputs["input"], inputs["weight"], routing, mask, outputs["output"], ctx)
