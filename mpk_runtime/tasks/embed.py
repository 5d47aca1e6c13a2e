"""Embedding lookup of the iteration's tokens."""

from __future__ import annotations

from typing import Any

import torch

from .. import archs, contract
from ..dtypes import FLOATING
from ..errors import DTypeError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskFailure, TaskSpec, register_task, split, whole


@register_task
class Embed(TaskSpec):
    name = "embed"
    inputs = {"input": whole(), "weight": split(x=1)}
    outputs = {"output": split(x=1)}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: "common/embed.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::embed"
    reference = "embed"
    doc = """output[b] = weight[input[b]]: input holds int64 token ids (batch,), e.g. the meta tensor
    input_tokens attached with pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens");
    weight is (vocab, hidden) and output (batch, hidden); grid x splits hidden. A token id outside
    the vocabulary stops the launch with a KernelError naming it."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        tok, w, y = args["input"].tensor, args["weight"].tensor, args["output"].tensor
        if tok.num_dims != 1 or tok.dtype.torch != torch.int64:
            raise DTypeError(f"embed: input must be an int64 vector of token ids, got {tok!r}")
        if w.num_dims != 2 or y.shape != (tok.shape[0], w.shape[1]):
            raise ShapeError(
                f"embed: weight must be (vocab, hidden) and output (batch, hidden) = "
                f"({tok.shape[0]}, hidden); got weight {w.shape}, output {y.shape}"
            )
        if w.dtype.torch not in FLOATING or y.dtype is not w.dtype:
            raise DTypeError(f"embed: weight and output must share a float dtype; got {w.dtype.short}, {y.dtype.short}")

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        batch, cols = s["output"].shape
        return [
            s["weight"].dtype.cpp,
            batch,
            s["weight"].full_shape[0],
            cols,
            s["weight"].full_shape[1],
            s["output"].full_shape[1],
        ]

    def error_message(self, code: int, value: int, layer: Any, tensors: dict[str, Any]) -> str:
        if code == contract.TASK_ERROR_INDEX:
            weight = next(a.tensor for a in layer.args if a.name == "weight")
            vocab = tensors[weight].shape[0]
            return f"token id {value} is outside the vocabulary [0, {vocab}) of {weight!r}"
        return super().error_message(code, value, layer, tensors)

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        tok, w = inputs["input"], inputs["weight"]
        bad = (tok < 0) | (tok >= w.shape[0])
        if bool(bad.any()):
            raise TaskFailure(contract.TASK_ERROR_INDEX, int(tok[bad][0]))
        super().emulate(inputs, outputs, values, ctx)
