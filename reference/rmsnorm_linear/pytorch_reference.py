"""Canonical PyTorch reference of rmsnorm_linear: an RMSNorm of the input rows, then a linear."""

import torch


def rmsnorm_linear(input: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(input * rsqrt(mean(input^2, dim=-1) + eps) * norm_weight) @ weight.T, all in fp32, returned
    in input's dtype (the normalized rows are not rounded: no tensor holds them)."""
    x = input.float()
    normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * norm_weight.float()
    return (normed @ weight.float().T).to(input.dtype)
