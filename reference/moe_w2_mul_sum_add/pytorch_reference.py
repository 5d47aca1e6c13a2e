"""Canonical PyTorch reference of the moe_w2_mul_sum_add layer."""

import torch


def moe_w2_mul_sum_add(
    input: torch.Tensor,
    weight: torch.Tensor,
    routing_indices: torch.Tensor,
    expert_mask: torch.Tensor,
    topk_weights: torch.Tensor,
    residual: torch.Tensor,
) -> torch.Tensor:
    """The down projection and weighted sum of an MoE block. input (tokens, topk, I): each token's
    activation per expert slot; weight (E, H, I); routing_indices (E, tokens) as
    moe_topk_softmax_routing makes it (slot j + 1 of token t at expert e, 0 if not routed);
    topk_weights (tokens, topk); residual (tokens, H). Row t of the result (tokens, H) is
    residual[t] + sum_j topk_weights[t, j] * input[t, j] @ weight[e_j].T over the slots j some expert
    e_j claims. fp32 math, one rounding to input's dtype. expert_mask is not needed by the math (the
    routing says it all); it is taken because the layer takes it."""
    tokens = input.shape[0]
    out = residual.float().clone()
    for e in range(weight.shape[0]):
        t = (routing_indices[e, :tokens] > 0).nonzero().flatten()
        if t.numel():
            j = routing_indices[e, t].long() - 1
            y = input[t, j].float() @ weight[e].float().T
            out[t] += topk_weights[t, j].float()[:, None] * y
    return out.to(input.dtype)
