"""The references of the stencil scene, from the math."""

import torch


def row_stencil(input: torch.Tensor) -> torch.Tensor:
    x = input.float()
    up, down = torch.cat([x[:1], x[:-1]]), torch.cat([x[1:], x[-1:]])
    return ((up + x + down) / 3.0).to(input.dtype)


def rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = input.float()
    return (x * x.pow(2).mean(-1, keepdim=True).add(eps).rsqrt() * weight.float()).to(input.dtype)
