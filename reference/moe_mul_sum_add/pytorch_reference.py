"""Canonical PyTorch reference of the moe_mul_sum_add layer."""

import torch


def moe_mul_sum_add(input: torch.Tensor, topk_weights: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The combine step of an MoE block: sum over each token's topk rows of input (tokens, topk, H),
    weighted by topk_weights (tokens, topk), plus residual (tokens, H). fp32 math, in input's dtype."""
    mixed = (input.float() * topk_weights.float()[..., None]).sum(dim=1)
    return (mixed + residual.float()).to(input.dtype)
