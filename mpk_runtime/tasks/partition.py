"""How a layer's tensors are cut into per-task slices, and what a task template may know of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GRID_AXES = ("x", "y", "z")
CHOSEN_AT_RUN_TIME = "chosen at run time by grid"  # how describe() names a selected dimension


@dataclass(frozen=True)
class Partition:
    """How a tensor argument is cut into per-task slices.

    ``axes``: (dim, grid axis) pairs; the grid axis ("x", "y" or "z") cuts that tensor dimension into
    equal slices, one per grid index. A dimension no axis splits is passed whole to every task.

    ``selected``: (dim, grid axis) pairs for dimensions whose part a task touches is only known at
    run time, from the meta tensors (the rows of request x in a batch, the tokens routed to expert x).
    The task sees the whole dimension and picks its rows itself; the spec promises that tasks with
    different indices along that grid axis never touch the same elements. So the graph orders
    them against other layers as readers / writers of the whole dimension, but not against each other.
    """

    axes: tuple[tuple[int, str], ...] = ()
    selected: tuple[tuple[int, str], ...] = ()

    def axis_of(self, dim: int) -> str | None:
        return dict(self.axes).get(dim)

    @property
    def runtime_disjoint(self) -> bool:
        """Whether tasks of one layer touch disjoint parts of this argument chosen at run time."""
        return bool(self.selected)

    def selecting(self, **axes: int) -> Partition:
        """This partition, plus dimensions picked at run time: ``split(y=1).selecting(x=0)``."""
        _check_axes(axes)
        return Partition(self.axes, tuple(sorted(self.selected + tuple((dim, a) for a, dim in axes.items()))))

    def describe(self) -> str:
        parts = [f"dim {d} by grid {a}" for d, a in self.axes]
        parts += [f"dim {d} {CHOSEN_AT_RUN_TIME} {a}" for d, a in self.selected]
        return ", ".join(parts) or "whole"


def _check_axes(axes: dict[str, int]) -> None:
    for axis in axes:
        if axis not in GRID_AXES:
            raise ValueError(f"split() takes grid axes x, y, z; got {axis!r}")


def split(**axes: int) -> Partition:
    """``split(x=0)``: grid axis x cuts tensor dim 0 into grid_dim[0] equal slices."""
    _check_axes(axes)
    return Partition(tuple(sorted((dim, axis) for axis, dim in axes.items())))


def selected(**axes: int) -> Partition:
    """``selected(x=0)``: task x picks its rows of dim 0 at run time (see Partition.selected)."""
    return Partition().selecting(**axes)


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
