"""Canonical PyTorch reference of the allreduce layer."""

import torch


def allreduce(inputs: list[torch.Tensor], residual: torch.Tensor | None = None) -> torch.Tensor:
    """The sum of every rank's input (``inputs[r]`` is rank r's), plus ``residual``, in fp32 and in
    rank order, rounded once to the inputs' dtype."""
    acc = inputs[0].float()
    for x in inputs[1:]:
        acc = acc + x.float()
    if residual is not None:
        acc = acc + residual.float()
    return acc.to(inputs[0].dtype)
