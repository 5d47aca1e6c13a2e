"""Linear: output = input @ weight.T; the grid splits the weight's rows (the output's columns)."""

from __future__ import annotations

from typing import Any

from .. import archs
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, SliceInfo, TaskSpec, register_task, split, whole


def check_linear(name: str, args: dict[str, Arg], residual: bool, out_features: int | None = None) -> None:
    """``out_features``: the output's columns, if not the weight's rows (a fused gate / up projection)."""
    x, w, y = args["input"].tensor, args["weight"].tensor, args["output"].tensor
    if x.num_dims != 2 or w.num_dims != 2:
        raise ShapeError(
            f"{name}: input must be (batch, in_features) and weight (out_features, in_features); "
            f"got input {x.shape}, weight {w.shape}"
        )
    if w.shape[1] != x.shape[1]:
        raise ShapeError(f"{name}: weight {w.shape} must have in_features={x.shape[1]} columns to match input {x.shape}")
    want = (x.shape[0], w.shape[0] if out_features is None else out_features)
    if y.shape != want:
        raise ShapeError(f"{name}: output must be (batch, out_features) = {want}, got {y.shape}")
    named = [("input", x), ("weight", w), ("output", y)]
    if residual:
        r = args["residual"].tensor
        if r.shape != want:
            raise ShapeError(f"{name}: residual must have the output's shape {want}, got {r.shape}")
        named.append(("residual", r))
    for arg, t in named:
        if t.dtype.torch not in FLOATING:
            raise DTypeError(f"{name}: {arg} ({t!r}) must be bfloat16, float16 or float32")
        if t.dtype is not x.dtype:
            raise DTypeError(f"{name}: {arg} is {t.dtype.short} but input is {x.dtype.short}; use one dtype")


@register_task
class Linear(TaskSpec):
    name = "linear"
    residual = False  # linear_with_residual is this task with a residual input (one body, templated on it)
    inputs = {"input": whole(), "weight": split(x=0)}
    outputs = {"output": split(x=1)}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: "common/linear.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::linear"
    smem_function = "mpk::tasks::linear_smem_bytes"
    reference = "linear"
    doc = """output = input @ weight.T, accumulated in fp32. input is (batch, in_features), weight
    (out_features, in_features), output (batch, out_features); grid x splits out_features, so each
    task streams its rows of the weight once (tensor cores for bf16 / fp16)."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        check_linear(self.name, args, residual=self.residual)

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        batch, k = s["input"].shape
        return [
            s["input"].dtype.cpp,
            batch,
            k,
            s["weight"].shape[0],
            s["output"].full_shape[1],
            "true" if self.residual else "false",
        ]

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        return 500.0 + s["weight"].nbytes / 22.0  # the weight slice streamed at a fair share of HBM
