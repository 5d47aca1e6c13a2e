"""MoE gate / up projection: each active token times the w13 weights of its k experts."""

from __future__ import annotations

from .moe_experts import ExpertLinear
from .registry import register_task


@register_task
class MoeW13Linear(ExpertLinear):
    name = "moe_w13_linear"
    w13 = True
    reference = "moe_w13_linear"
    doc = """Gate and up projections of a mixture-of-experts block, for each active token's k experts.
    input (tokens, H); weight (E, 2 * I, H), each expert's gate rows then its up rows;
    routing_indices (E, tokens) and expert_mask (E + 1,) from moe_topk_softmax_routing; output
    (tokens, k, 2 * I): row (t, j) = input[t] @ weight[e].T ([gate | up]) for token t's j-th expert e,
    or, with output (tokens, k, I), silu(gate) * up computed in registers (SiLU-mul fused).

    grid_dim=(T, 1, 1): the T tasks share the routed work evenly at run time (16-row units of the
    experts that have tokens), so use about one task per worker (pk.params.num_workers) for the most
    bandwidth; experts without tokens cost nothing. Rows of inactive tokens are not written."""
