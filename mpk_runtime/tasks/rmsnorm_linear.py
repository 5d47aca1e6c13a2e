"""RMSNorm folded into a linear: output = rmsnorm(input, norm_weight) @ weight.T."""

from __future__ import annotations

from typing import Any

from ..errors import DTypeError
from .linear import Linear, check_linear
from .registry import Arg, SliceInfo, register_task, split, whole
from .rmsnorm import check_eps, check_norm_weight


@register_task
class RMSNormLinear(Linear):
    """The linear task's body (csrc/tasks/common/linear.cuh), which normalizes its input rows itself:
    a decoder's RMSNorm then needs no task, no tensor and no dependency hop of its own."""

    name = "rmsnorm_linear"
    inputs = {"input": whole(), "weight": split(x=0), "norm_weight": whole()}
    scalars = {"eps": 1e-6}
    function = "mpk::tasks::rmsnorm_linear"
    smem_function = "mpk::tasks::rmsnorm_linear_smem_bytes"
    reference = "rmsnorm_linear"
    doc = """output = rmsnorm(input) @ weight.T, where rmsnorm(input) = input * rsqrt(mean(input^2,
    dim=-1) + eps) * norm_weight. input is (batch, in_features), norm_weight (in_features,), weight
    (out_features, in_features), output (batch, out_features); grid x splits out_features. Each task
    normalizes the rows it reads (the row's scale is applied after the sum, in fp32; input *
    norm_weight is rounded to the input's dtype for the tensor cores), so the normalized input is
    never stored: use it where a linear is the RMSNorm's only reader (a decoder's qkv, its gate / up
    projection, the lm head)."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        check_linear(self.name, args, residual=False, out_features=self.out_features(args["weight"].tensor))
        x, nw = args["input"].tensor, args["norm_weight"].tensor
        check_norm_weight(self.name, "norm_weight", nw, x)
        if nw.dtype is not x.dtype:
            raise DTypeError(f"{self.name}: norm_weight is {nw.dtype.short} but input is {x.dtype.short}; use one dtype")
        check_eps(self.name, values["eps"])

    def out_features(self, weight: Any) -> int:
        """The output's columns for ``weight`` (its rows; a subclass may fuse them)."""
        return weight.shape[0]

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        return super().cost_ns(s) + 200.0  # the rows' sum of squares
