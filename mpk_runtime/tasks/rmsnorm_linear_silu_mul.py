"""A gated MLP's gate / up projection with its RMSNorm and SiLU-mul folded in:
output = silu(rmsnorm(input) @ w_gate.T) * (rmsnorm(input) @ w_up.T)."""

from __future__ import annotations

from typing import Any

from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, SliceInfo, register_task, split, whole
from .rmsnorm import check_eps, check_norm_weight
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
        if x.num_dims != 2 or w.num_dims != 2 or y.num_dims != 2:
            raise ShapeError(
                f"{self.name}: input must be (batch, hidden), weight (2 * inter, hidden) and output (batch, inter); "
                f"got input {x.shape}, weight {w.shape}, output {y.shape}"
            )
        if w.shape[1] != x.shape[1]:
            raise ShapeError(f"{self.name}: weight {w.shape} must have in_features={x.shape[1]} columns to match input {x.shape}")
        if y.shape != (x.shape[0], w.shape[0] // 2) or w.shape[0] % 2:
            raise ShapeError(
                f"{self.name}: output must be (batch, inter) = {(x.shape[0], w.shape[0] // 2)} for weight {w.shape} "
                f"(gate and up rows), got {y.shape}; build the weight with pk.shuffle_tensors([w_gate, w_up], "
                f"shuffled_dim=0, num_groups=grid x)"
            )
        for arg, t in (("weight", w), ("output", y), ("norm_weight", args["norm_weight"].tensor)):
            if t.dtype.torch not in FLOATING or t.dtype is not x.dtype:
                raise DTypeError(f"{self.name}: {arg} is {t.dtype.short} but input is {x.dtype.short}; use one dtype")
        check_norm_weight(self.name, "norm_weight", args["norm_weight"].tensor, x)
        check_eps(self.name, values["eps"])

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        batch, k = s["input"].shape
        return [s["input"].dtype.cpp, batch, k, s["weight"].shape[0], s["output"].full_shape[1]]
