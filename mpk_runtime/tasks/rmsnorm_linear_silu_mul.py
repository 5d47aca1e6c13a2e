"""A gated MLP's gate / up projection with its RMSNorm and SiLU-mul folded in:
output = silu(rmsnorm(input) @ w_gate.T) * (rmsnorm(input) @ w_up.T)."""

from __future__ import annotations

from typing import Any

from ..errors import ShapeError
from .registry import Arg, SliceInfo, register_task, split, whole
from .rmsnorm_linear import RMSNormLinear


@register_task
class RMSNormLinearSiluMul(RMSNormLinear):
    """rmsnorm_linear's body (csrc/tasks/common/linear.cuh) whose epilogue pairs each task's gate and
    up rows: a decoder's MLP then needs no SiLU-mul task, no dependency hop and no (batch, 2 * inter)
    intermediate."""

    name = "rmsnorm_linear_silu_mul"
    inputs = {"input": whole(), "weight": split(x=0), "norm_weight": whole()}
    outputs = {"output": split(x=1)}
    function = "mpk::tasks::rmsnorm_linear_silu_mul"
    smem_function = "mpk::tasks::rmsnorm_linear_silu_mul_smem_bytes"
    reference = "rmsnorm_linear_silu_mul"
    doc = """output = silu(rmsnorm(input) @ w_gate.T) * (rmsnorm(input) @ w_up.T), where rmsnorm is
    rmsnorm_linear's. input is (batch, hidden), norm_weight (hidden,), output (batch, inter), weight
    (2 * inter, hidden) with each task's rows its gate rows then the matching up rows:
    pk.shuffle_tensors([w_gate, w_up], shuffled_dim=0, num_groups=grid x). Grid x splits inter. The
    gate and up values are rounded to the input's dtype (as a gate / up linear's output would be),
    then multiplied in fp32 as silu_mul does."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, w, y = args["input"].tensor, args["weight"].tensor, args["output"].tensor
        if w.shape[0] % 2 or (y.num_dims == 2 and 2 * y.shape[1] != w.shape[0]):  # the gate / up layout, with its fix
            raise ShapeError(
                f"{self.name}: output must be (batch, inter) = {(x.shape[0], w.shape[0] // 2)} for weight {w.shape} "
                f"(gate and up rows), got {y.shape}; build the weight with pk.shuffle_tensors([w_gate, w_up], "
                f"shuffled_dim=0, num_groups=grid x)"
            )
        super().check(args, values, grid)  # rmsnorm_linear's, with inter output columns

    def out_features(self, weight: Any) -> int:
        return weight.shape[0] // 2

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        batch, k = s["input"].shape
        return [s["input"].dtype.cpp, batch, k, s["weight"].shape[0], s["output"].full_shape[1]]
