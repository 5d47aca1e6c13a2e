"""References of the pipelines in this folder, composed from the layers' canonical references."""

from mpk_runtime.references import find

rmsnorm = find("rmsnorm")
linear = find("linear")
linear_with_residual = find("linear_with_residual")
silu_mul = find("silu_mul")
embed = find("embed")


def qwen3_mlp(input, norm_weight, w_gate, w_up, w_down, residual, groups):
    """RMSNorm -> gate/up linear (weights interleaved in `groups` groups) -> SiLU*mul -> down + residual,
    with the runtime's roundings: every layer's output is stored in bf16."""
    from mpk_runtime.shuffle import shuffle

    x = rmsnorm(input, norm_weight)
    mid = linear(x, shuffle([w_gate, w_up], 0, groups))
    return linear_with_residual(silu_mul(mid, num_groups=groups), w_down, residual)
