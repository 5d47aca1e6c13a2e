"""Canonical PyTorch reference of rmsnorm_linear_silu_mul: a gated MLP's gate / up projection of the
RMSNorm'd input rows (rmsnorm_linear's reference), then SiLU-mul (silu_mul's)."""

import torch

from mpk_runtime.harness import find_reference

rmsnorm_linear = find_reference("rmsnorm_linear")
silu_mul = find_reference("silu_mul")


def rmsnorm_linear_silu_mul(
    input: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float = 1e-6, num_groups: int = 1
) -> torch.Tensor:
    """weight (2 * inter, hidden) is num_groups chunks of [gate rows | up rows]; returns silu(g) * u
    (batch, inter), chunk by chunk: g and u are rmsnorm_linear's output (fp32 math, rounded to input's
    dtype, as gate / up outputs are), silu(g) * u is silu_mul's (fp32, rounded once)."""
    return silu_mul(rmsnorm_linear(input, weight, norm_weight, eps), num_groups=num_groups)
