"""References of the pipelines in this folder, composed from the layers' canonical references."""

import torch

from mpk_runtime.harness import find_reference as find

rmsnorm = find("rmsnorm")
linear = find("linear")
linear_with_residual = find("linear_with_residual")
silu_mul = find("silu_mul")
embed = find("embed")


def qwen3_mlp(input, norm_weight, w_gate, w_up, w_down, residual, groups=1):
    """RMSNorm -> gate and up linear -> SiLU*mul -> down + residual, with the runtime's roundings:
    every layer's output is stored in bf16. (``groups``, how the kernel interleaves the gate and up
    weights, does not change the math.)"""
    x = rmsnorm(input, norm_weight)
    gate_up = torch.cat([linear(x, w_gate), linear(x, w_up)], dim=-1)
    return linear_with_residual(silu_mul(gate_up), w_down, residual)


allreduce = find("allreduce")


def qwen3_mlp_tp(ranks, input, norm_weight, residual):
    """The tensor-parallel MLP: rank r holds rows of the gate and up weights (column-parallel) and the
    matching columns of the down weight (row-parallel); each computes its partial down projection
    (stored in bf16), and one all-reduce sums the partials with the residual. ``ranks[r]`` has rank
    r's ``w_gate``, ``w_up`` and ``w_down`` shards."""
    x = rmsnorm(input, norm_weight)
    partials = []
    for a in ranks:
        gate_up = torch.cat([linear(x, a.w_gate), linear(x, a.w_up)], dim=-1)
        partials.append(linear(silu_mul(gate_up), a.w_down))
    return allreduce(partials, residual)
