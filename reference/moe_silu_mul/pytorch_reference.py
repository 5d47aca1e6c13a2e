"""Canonical PyTorch reference of the moe_silu_mul layer."""

import torch
import torch.nn.functional as F


def moe_silu_mul(input: torch.Tensor) -> torch.Tensor:
    """input (tokens, topk, 2 * I) is [gate | up] per row; returns silu(gate) * up (tokens, topk, I),
    in fp32, in input's dtype."""
    inter = input.shape[-1] // 2
    x = input.float()
    return (F.silu(x[..., :inter]) * x[..., inter:]).to(input.dtype)
