"""Greedy sampling, step 2: per row, the best of the partial maxima: the sampled token."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs
from ..errors import DTypeError, ShapeError
from .registry import Arg, SliceInfo, TaskSpec, register_task, split


@register_task
class ArgmaxReduce(TaskSpec):
    name = "argmax_reduce"
    inputs = {"values": split(x=0), "indices": split(x=0)}
    outputs = {"output": split(x=0)}
    token_dims = {"values": 0, "indices": 0, "output": 0}
    headers = {arch: "common/argmax.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::argmax_reduce"
    reference = "argmax_reduce"
    doc = """output[b] = indices[b, j] of the largest values[b, j] (lowest index on ties): the token of
    each row. output is int64 (batch,), typically the meta tensor output_tokens attached with
    pk.attach_input(pk.meta_tensors["output_tokens"], "output_tokens"); grid x splits the rows."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        v, i, out = args["values"].tensor, args["indices"].tensor, args["output"].tensor
        if v.num_dims != 2 or i.shape != v.shape or out.shape != (v.shape[0],):
            raise ShapeError(
                f"argmax_reduce: values and indices must be (batch, parts) and output (batch,); "
                f"got {v.shape}, {i.shape}, {out.shape}"
            )
        if v.dtype.torch != torch.float32 or i.dtype.torch != torch.int64 or out.dtype.torch != torch.int64:
            raise DTypeError("argmax_reduce: values must be float32, indices and output int64")

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        rows, parts = s["values"].shape
        return [s["values"].full_shape[0], rows, parts]
