"""MoE down projection: each (token, slot) activation row times its expert's w2 weights."""

from __future__ import annotations

from .moe_experts import ExpertLinear
from .registry import register_task


@register_task
class MoeW2Linear(ExpertLinear):
    name = "moe_w2_linear"
    w13 = False
    reference = "moe_w2_linear"
    doc = """Down projection of a mixture-of-experts block. input (tokens, k, I): the activation of
    each active token's k experts (moe_silu_mul, or moe_w13_linear with SiLU-mul fused); weight
    (E, H, I); routing_indices (E, tokens) and expert_mask (E + 1,) from moe_topk_softmax_routing;
    output (tokens, k, H): row (t, j) = input[t, j] @ weight[e].T for token t's j-th expert e.

    grid_dim=(T, 1, 1): the T tasks share the routed work evenly at run time (16-row units of the
    experts that have tokens), so use about one task per worker for the most bandwidth. Rows of
    inactive tokens are not written."""
