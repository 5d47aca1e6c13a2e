"""Canonical PyTorch reference of the moe_w2_linear layer."""

import torch


def moe_w2_linear(input: torch.Tensor, weight: torch.Tensor, routing_indices: torch.Tensor) -> torch.Tensor:
    """Down projection of each (token, slot) row by its expert. input (tokens, topk, I), weight
    (E, H, I), routing_indices (E, tokens) as moe_topk_softmax_routing makes it. Row (t, j) of the
    result (tokens, topk, H) is input[t, j] @ weight[e].T for the expert e with
    routing_indices[e, t] == j + 1. fp32 math, one rounding to input's dtype; rows no expert claims
    are zero."""
    tokens, topk, _ = input.shape
    experts, hidden, _ = weight.shape
    out = torch.zeros(tokens, topk, hidden)
    for e in range(experts):
        t = (routing_indices[e, :tokens] > 0).nonzero().flatten()
        if t.numel():
            j = routing_indices[e, t].long() - 1
            out[t, j] = input[t, j].float() @ weight[e].float().T
    return out.to(input.dtype)
