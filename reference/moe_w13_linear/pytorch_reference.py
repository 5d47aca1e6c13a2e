"""Canonical PyTorch reference of the moe_w13_linear layer."""

import torch
import torch.nn.functional as F


def moe_w13_linear(
    input: torch.Tensor, weight: torch.Tensor, routing_indices: torch.Tensor, topk: int, fuse_silu_mul: bool = False
) -> torch.Tensor:
    """Gate and up projections of each token's experts. input (tokens, H), weight (E, 2 * I, H)
    (gate rows, then up rows), routing_indices (E, tokens) as moe_topk_softmax_routing makes it.
    Row (t, j) of the result (tokens, topk, 2 * I) is input[t] @ weight[e].T for the expert e with
    routing_indices[e, t] == j + 1: [gate | up]; with fuse_silu_mul, silu(gate) * up (tokens, topk, I).
    fp32 math, one rounding to input's dtype; rows no expert claims are zero."""
    tokens = input.shape[0]
    experts, two_i, _ = weight.shape
    out = torch.zeros(tokens, topk, two_i // 2 if fuse_silu_mul else two_i)
    for e in range(experts):
        t = (routing_indices[e, :tokens] > 0).nonzero().flatten()
        if t.numel():
            h = input[t].float() @ weight[e].float().T
            if fuse_silu_mul:
                h = F.silu(h[:, : two_i // 2]) * h[:, two_i // 2 :]
            out[t, routing_indices[e, t].long() - 1] = h
    return out.to(input.dtype)
