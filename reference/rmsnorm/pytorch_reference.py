"""Canonical PyTorch reference of the rmsnorm layer."""

import torch


def rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """y = x * rsqrt(mean(x^2, last dim) + eps) * w, computed in fp32, returned in x's dtype."""
    x = input.float()
    rms = x.pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()
    return (x * rms * weight.float()).to(input.dtype)
