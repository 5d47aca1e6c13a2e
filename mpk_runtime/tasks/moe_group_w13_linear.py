"""DeepSeek-V3's group routing and the MoE gate / up projection in one layer: each task routes the
active tokens itself from the router logits and the score bias, then streams its share of the
routed experts' w13 weights."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from .moe_experts import ExpertLinear, emulate_units
from .moe_group_routing import RoutesByGroups
from .moe_topk_w13_linear import MoeTopkW13Linear
from .registry import Arg, EmulationContext, SliceInfo, register_task, whole


@register_task
class MoeGroupW13Linear(RoutesByGroups, MoeTopkW13Linear):
    name = "moe_group_w13_linear"
    inputs = {"input": whole(), "weight": whole(), "router_logits": whole(), "score_bias": whole()}
    options = {"n_group": 1, "topk_group": 1}
    headers = {arch: "common/moe_group_w13_linear.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_group_w13_linear"
    smem_function = "mpk::tasks::moe_group_w13_linear_smem_bytes"
    reference = "moe_group_w13_linear"
    phases = ("routing: group choices of the logits, expert mask", *ExpertLinear.phases)
    routing_layer = "moe_sigmoid_group_routing"
    doc = """moe_sigmoid_group_routing's choices and moe_w13_linear's gate / up projection in one
    layer, for decode-sized batches: moe_topk_w13_linear with DeepSeek-V3's routing. input (tokens,
    H); weight (E, 2 * I, H), each expert's gate rows then its up rows; router_logits (tokens, E),
    float32, bfloat16 or float16; score_bias (E,) float32, finite (checked as the routing layer
    checks it); n_group, topk_group as moe_sigmoid_group_routing takes them; output (tokens, k, 2 *
    I) ([gate | up]) or (tokens, k, I) (silu(gate) * up): row (t, j) for token t's j-th expert, chosen
    as moe_sigmoid_group_routing chooses (the k largest biased sigmoid scores within the topk_group
    best groups).

    Each task routes every active token itself, in shared memory, so the expert weights start
    streaming without waiting for the routing layer and one dependency hop. Run
    moe_sigmoid_group_routing on the same logits and bias beside it (the down projection and the
    weighted sum need its routing_indices, expert_mask and topk_weights) and give this layer one task
    fewer than the workers, so that the routing task has a worker of its own. Needs E * (tokens | 1)
    <= 16384 (the slots in shared memory): above that use moe_sigmoid_group_routing and
    moe_w13_linear.

    grid_dim=(T, 1, 1): the T tasks share the routed work evenly at run time (16-row units of the
    experts that have tokens). Rows of inactive tokens are not written."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        super().check(args, values, grid)  # the streams, the logits, the slots
        experts = args["weight"].tensor.shape[0]
        k = args["output"].tensor.shape[1]
        self.check_groups(args["score_bias"].tensor, experts, k, values)

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        return [*super().template_args(s, values), int(values["n_group"]), int(values["topk_group"])]

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        k = outputs["output"].shape[1]
        _, routing, mask = self.route_by_reference(inputs["router_logits"], inputs["score_bias"], k, values)
        emulate_units(True, inputs["input"], inputs["weight"], routing, mask, outputs["output"], ctx)
