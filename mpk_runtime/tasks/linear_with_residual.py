"""Linear with a residual: output = input @ weight.T + residual (one rounding, in fp32)."""

from __future__ import annotations

from typing import Any

from .linear import check_linear
from .registry import ARCHS, Arg, SliceInfo, TaskSpec, register_task, split, whole


@register_task
class LinearWithResidual(TaskSpec):
    name = "linear_with_residual"
    inputs = {"input": whole(), "weight": split(x=0), "residual": split(x=1)}
    outputs = {"output": split(x=1)}
    token_dims = {"input": 0, "residual": 0, "output": 0}
    headers = {arch: "common/linear.cuh" for arch in ARCHS}
    function = "mpk::tasks::linear"
    smem_function = "mpk::tasks::linear_smem_bytes"
    reference = "linear_with_residual"
    doc = """output = input @ weight.T + residual, accumulated in fp32 and rounded once. residual and
    output are (batch, out_features); grid x splits out_features."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        check_linear("linear_with_residual", args, residual=True)

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        batch, k = s["input"].shape
        return [s["input"].dtype.cpp, batch, k, s["weight"].shape[0], s["output"].full_shape[1], "true"]

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        return 500.0 + s["weight"].nbytes / 22.0
