"""Linear with a residual: output = input @ weight.T + residual (one rounding, in fp32)."""

from __future__ import annotations

from .linear import Linear
from .registry import register_task, split, whole


@register_task
class LinearWithResidual(Linear):
    """The linear task's body, header and cost, with the residual added before the one rounding."""

    name = "linear_with_residual"
    residual = True
    inputs = {"input": whole(), "weight": split(x=0), "residual": split(x=1)}
    in_place = {"output": "residual"}  # a task adds its own columns of the residual, then writes them
    token_dims = {"input": 0, "residual": 0, "output": 0}
    reference = "linear_with_residual"
    doc = """output = input @ weight.T + residual, accumulated in fp32 and rounded once. residual and
    output are (batch, out_features); grid x splits out_features."""
