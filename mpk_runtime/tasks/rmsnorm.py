"""RMSNorm over the last dimension of a (batch, hidden) tensor; the grid splits the rows."""

from __future__ import annotations

import math
from typing import Any

from ..dtypes import FLOATING
from ..errors import ConfigError, DTypeError, ShapeError
from .registry import Arg, SliceInfo, TaskSpec, register_task, split, whole


def check_norm_weight(task: str, arg: str, w: Any, x: Any) -> None:
    """An RMSNorm's weight (rmsnorm, rmsnorm_linear): one value per column of the input."""
    if w.shape != (x.shape[1],):
        raise ShapeError(f"{task}: {arg} must have shape ({x.shape[1]},) to match input {x.shape}, got {w.shape}")


def check_eps(task: str, eps: Any) -> None:
    """An RMSNorm's eps (rmsnorm, rmsnorm_linear): a positive finite number."""
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < math.inf:
        raise ConfigError(f"{task}: eps={eps!r} must be a positive number, e.g. 1e-6")


@register_task
class RMSNorm(TaskSpec):
    name = "rmsnorm"
    inputs = {"input": split(x=0), "weight": whole()}
    outputs = {"output": split(x=0)}
    in_place = {"output": "input"}  # a task normalizes its own rows: each read before it is written
    scalars = {"eps": 1e-6}
    token_dims = {"input": 0, "output": 0}
    headers = {"sm80": "common/rmsnorm.cuh", "sm90": "common/rmsnorm.cuh", "sm100": "common/rmsnorm.cuh"}
    function = "mpk::tasks::rmsnorm"
    reference = "rmsnorm"
    doc = """output = input * rsqrt(mean(input^2, dim=-1) + eps) * weight, in fp32, stored in
    input's dtype. input and output are (batch, hidden), weight is (hidden,); grid x splits the
    batch rows (grid (batch, 1, 1) gives one row per task)."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, w, y = args["input"].tensor, args["weight"].tensor, args["output"].tensor
        if x.num_dims != 2:
            raise ShapeError(f"rmsnorm: input must be (batch, hidden), got shape {x.shape}")
        check_norm_weight(self.name, "weight", w, x)
        if y.shape != x.shape:
            raise ShapeError(f"rmsnorm: output must have input's shape {x.shape}, got {y.shape}")
        for name, t in (("input", x), ("weight", w), ("output", y)):
            if t.dtype.torch not in FLOATING:
                raise DTypeError(f"rmsnorm: {name} ({t!r}) must be bfloat16, float16 or float32")
            if t.dtype is not x.dtype:
                raise DTypeError(f"rmsnorm: {name} is {t.dtype.short} but input is {x.dtype.short}; use one dtype")
        check_eps(self.name, values["eps"])

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        rows, hidden = s["input"].shape
        return [s["input"].dtype.cpp, rows, hidden]

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        return [float(values["eps"]), s["input"].full_shape[0]]  # the batch's rows: for active_rows
