"""The MoE block of a Qwen3-MoE decoder layer, from the layers' canonical references: router
linear -> top-k softmax routing (or DeepSeek-V3's sigmoid group routing) -> w13 (gate / up) ->
SiLU-mul -> w2 (down) -> weighted sum over each token's k experts + residual (or w2 and the sum in
one, moe_w2_mul_sum_add). Returns every intermediate, for the active tokens."""

import torch

from mpk_runtime.harness import find_reference

linear = find_reference("linear")
routing = find_reference("moe_topk_softmax_routing")
group_routing = find_reference("moe_sigmoid_group_routing")
w13_linear = find_reference("moe_w13_linear")
silu_mul = find_reference("moe_silu_mul")
w2_linear = find_reference("moe_w2_linear")
mul_sum_add = find_reference("moe_mul_sum_add")
w2_mul_sum_add = find_reference("moe_w2_mul_sum_add")


def moe_block(
    input: torch.Tensor,
    router_weight: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    residual: torch.Tensor,
    topk: int,
    fused: bool = False,
    w2_sum: bool = False,
    group: tuple[torch.Tensor, int, int, float] | None = None,
) -> dict[str, torch.Tensor]:
    """input and residual (tokens, H), router_weight (E, H), w13 (E, 2 * I, H), w2 (E, H, I). With
    fused, SiLU-mul happens in the w13 linear (one rounding) and there is no `mid`; with w2_sum, the
    down projection and the weighted sum are one layer (no rounding between) and there is no `y`.
    group: (score_bias, n_group, topk_group, routed_scaling_factor) routes with the sigmoid group
    routing (normalized weights) instead of the softmax."""
    out = {"logits": linear(input, router_weight)}
    if group is None:
        out["topk_weights"], out["routing_indices"], out["expert_mask"] = routing(out["logits"], topk)
    else:
        bias, groups, kept, scale = group
        out["topk_weights"], out["routing_indices"], out["expert_mask"] = group_routing(
            out["logits"], bias, topk, groups, kept, True, scale
        )
    if fused:
        out["act"] = w13_linear(input, w13, out["routing_indices"], topk, fuse_silu_mul=True)
    else:
        out["mid"] = w13_linear(input, w13, out["routing_indices"], topk)
        out["act"] = silu_mul(out["mid"])
    if w2_sum:
        route = (out["routing_indices"], out["expert_mask"], out["topk_weights"])
        out["output"] = w2_mul_sum_add(out["act"], w2, *route, residual)
    else:
        out["y"] = w2_linear(out["act"], w2, out["routing_indices"])
        out["output"] = mul_sum_add(out["y"], out["topk_weights"], residual)
    return out
