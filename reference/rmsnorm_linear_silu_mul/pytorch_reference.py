"""Canonical PyTorch reference of rmsnorm_linear_silu_mul: a gated MLP's gate / up projection of the
RMSNorm'd input rows, then SiLU-mul."""

import torch
import torch.nn.functional as F


def rmsnorm_linear_silu_mul(
    input: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float = 1e-6, num_groups: int = 1
) -> torch.Tensor:
    """weight (2 * inter, hidden) is num_groups chunks of [gate rows | up rows]; returns
    silu(g) * u (batch, inter), chunk by chunk, where g and u are rmsnorm(input) @ rows.T computed in
    fp32 and rounded to input's dtype (as gate / up outputs are), and silu(g) * u is in fp32."""
    x = input.float()
    normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * norm_weight.float()
    projected = (normed @ weight.float().T).to(input.dtype).float()
    b, two_i = projected.shape
    halves = projected.reshape(b, num_groups, 2, two_i // (2 * num_groups))
    return (F.silu(halves[:, :, 0]) * halves[:, :, 1]).reshape(b, two_i // 2).to(input.dtype)
