"""How a layer's tensors are cut into per-task slices, and what a task template may know of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GRID_AXES = ("x", "y", "z")


@dataclass(frozen=True)
class Partition:
    """How a tensor argument is cut into per-task slices.

    ``axes[d]`` names the grid axis ("x", "y" or "z") that splits tensor dimension ``d``; a dimension
    that no axis splits is passed whole to every task.
    """

    axes: tuple[tuple[int, str], ...] = ()

    def axis_of(self, dim: int) -> str | None:
        return dict(self.axes).get(dim)

    def describe(self) -> str:
        if not self.axes:
            return "whole"
        return ", ".join(f"dim {d} by grid {a}" for d, a in self.axes)


def split(**axes: int) -> Partition:
    """``split(x=0)``: grid axis x cuts tensor dim 0 into grid_dim[0] equal slices."""
    for axis in axes:
        if axis not in GRID_AXES:
            raise ValueError(f"split() takes grid axes x, y, z; got {axis!r}")
    return Partition(tuple(sorted((dim, axis) for axis, dim in axes.items())))


def whole() -> Partition:
    """Every task sees the whole tensor."""
    return Partition(())


@dataclass(frozen=True)
class Arg:
    """One tensor argument of a task as bound by a layer call."""

    name: str
    tensor: Any  # graph.tensors.DTensor
    partition: Partition
    writes: bool


@dataclass(frozen=True)
class SliceInfo:
    """What a task template may know about one argument: the shape of its slice and the layout of
    the whole tensor it is cut from (strides in elements)."""

    name: str
    dtype: Any  # dtypes.DType
    shape: tuple[int, ...]
    full_shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize
