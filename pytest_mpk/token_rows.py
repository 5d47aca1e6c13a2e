"""Which request and position a token row of an output holds, for mismatch reports: a row of a
layer's token dimension is one of the iteration's new tokens, laid out as qo_indptr says (slot s,
in test mode request s, has rows qo_indptr[s] .. qo_indptr[s + 1])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mpk_runtime import harness


def token_dim_of(graph: Any, name: str) -> int | None:
    """The dim of output ``name`` that its writing layer declares as token rows, or None."""
    for layer in graph.layers:
        for arg in layer.args:
            if arg.tensor == name and arg.direction == "OUT":
                dim = harness.token_dim(layer.task, arg.name)
                if dim is not None:
                    return dim
    return None


def describe_row(row: int, meta: dict[str, Any]) -> str:
    """'row 5 is request 1's token at position 19 (its new token 2 of 4)', from the meta tensors as
    the test-mode run left them (step advanced past the iteration's tokens)."""
    qo = [int(v) for v in meta["qo_indptr_buffer"].tolist()]
    steps = [int(v) for v in meta["step"].tolist()]
    for slot in range(len(qo) - 1):
        if qo[slot] <= row < qo[slot + 1]:
            n, j = qo[slot + 1] - qo[slot], row - qo[slot]
            if slot >= len(steps):
                break
            return f"row {row} is request {slot}'s token at position {steps[slot] - n + j} (its new token {j} of {n})"
    return f"row {row} is past the iteration's {qo[-1]} new token{'' if qo[-1] == 1 else 's'} (an inactive row)"


def with_rows(
    where: Callable[[tuple[int, ...]], str], dim: int | None, meta: dict[str, Any] | None, shape: tuple[int, ...]
) -> Callable[[tuple[int, ...]], str]:
    """``where``, followed by the request and position of the element's token row where it has one:
    as Runtime::active_rows has it, only a dim of max_num_batched_tokens rows holds the batch (of
    another size it is computed whole)."""
    if dim is None or meta is None or shape[dim] != meta["input_tokens"].shape[0]:
        return where
    return lambda index: f"{where(index)}; {describe_row(index[dim], meta)}"
