"""Canonical PyTorch reference of the moe_group_w13_linear layer."""

import torch

from mpk_runtime.harness import find_reference

group_routing = find_reference("moe_sigmoid_group_routing")
w13_of_routing = find_reference("moe_w13_linear")


def moe_group_w13_linear(
    input: torch.Tensor,
    weight: torch.Tensor,
    router_logits: torch.Tensor,
    score_bias: torch.Tensor,
    topk: int,
    n_group: int,
    topk_group: int,
    fuse_silu_mul: bool = False,
) -> torch.Tensor:
    """Group-limited routing and the gate / up projections of each token's experts. input (tokens, H),
    router_logits (tokens, E), score_bias (E,), weight (E, 2 * I, H) (gate rows, then up rows). Token
    t's experts are its topk choices as moe_sigmoid_group_routing makes them (the largest biased
    sigmoid scores within the topk_group best of n_group groups, largest first); row (t, j) of the
    result (tokens, topk, 2 * I) is input[t] @ weight[e].T for its j-th expert e: [gate | up]; with
    fuse_silu_mul, silu(gate) * up (tokens, topk, I). fp32 math, one rounding to input's dtype."""
    _, routing_indices, _ = group_routing(router_logits, score_bias, topk, n_group, topk_group)
    return w13_of_routing(input, weight, routing_indices, topk, fuse_silu_mul)
