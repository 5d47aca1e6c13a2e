"""Canonical PyTorch reference of the silu_mul layer."""

import torch
import torch.nn.functional as F


def silu_mul(input: torch.Tensor, num_groups: int = 1) -> torch.Tensor:
    """input (batch, 2 * inter) is num_groups chunks of [gate | up]; returns silu(gate) * up
    (batch, inter), chunk by chunk, in fp32, in input's dtype."""
    b, two_i = input.shape
    x = input.float().reshape(b, num_groups, 2, two_i // (2 * num_groups))
    return (F.silu(x[:, :, 0]) * x[:, :, 1]).reshape(b, two_i // 2).to(input.dtype)
