"""Canonical PyTorch reference of the moe_topk_w13_linear layer."""

import torch
import torch.nn.functional as F


def moe_topk_w13_linear(
    input: torch.Tensor, weight: torch.Tensor, router_logits: torch.Tensor, topk: int, fuse_silu_mul: bool = False
) -> torch.Tensor:
    """Top-k routing and the gate / up projections of each token's experts. input (tokens, H),
    router_logits (tokens, E), weight (E, 2 * I, H) (gate rows, then up rows). Token t's experts are
    its topk largest logits, largest first, equal logits lower expert index first, NaN as -inf; row
    (t, j) of the result (tokens, topk, 2 * I) is input[t] @ weight[e].T for its j-th expert e:
    [gate | up]; with fuse_silu_mul, silu(gate) * up (tokens, topk, I). fp32 math, one rounding to
    input's dtype."""
    logits = router_logits.float()
    logits = torch.where(logits.isnan(), torch.full_like(logits, float("-inf")), logits)
    chosen = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :topk]  # stable: lower index first
    half = weight.shape[1] // 2
    out = torch.zeros(input.shape[0], topk, half if fuse_silu_mul else 2 * half)
    for e in chosen.unique().tolist():
        t, j = (chosen == e).nonzero(as_tuple=True)
        h = input[t].float() @ weight[e].float().T
        out[t, j] = F.silu(h[:, :half]) * h[:, half:] if fuse_silu_mul else h
    return out.to(input.dtype)
