"""What a layer's grid must do to its arguments' partitions: split or select only dims its tensors
have, divide the dims it splits, use every grid axis it is given (else tasks repeat each other's
work), and cut every output along every axis it has (else tasks write the same elements)."""

from __future__ import annotations

from ..errors import GridError
from ..tasks.partition import GRID_AXES, Arg
from ..tasks.spec import TaskSpec


def check_partitions(layer: str, spec: TaskSpec, grid: tuple[int, int, int], args: list[Arg]) -> None:
    used = set()
    for a in args:
        for dim, axis in a.partition.selected:
            used.add(axis)
            if dim >= a.tensor.num_dims:
                raise GridError(
                    f"{layer}: {spec.name} selects rows of dim {dim} of {a.name!r} at run time, but {a.tensor!r} has "
                    f"only {a.tensor.num_dims} dims"
                )
        for dim, axis in a.partition.axes:
            used.add(axis)
            if dim >= a.tensor.num_dims:
                raise GridError(
                    f"{layer}: {spec.name} splits dim {dim} of {a.name!r}, but {a.tensor!r} has only {a.tensor.num_dims} dims"
                )
            g = grid[GRID_AXES.index(axis)]
            size = a.tensor.shape[dim]
            if size % g:
                divisors = [d for d in range(1, size + 1) if size % d == 0][-4:]
                raise GridError(
                    f"{layer}: grid_dim {axis}={g} does not divide dim {dim} (size {size}) of {a.name!r} "
                    f"({spec.name} splits {a.name}'s {a.partition.describe()}); use a divisor of {size}, "
                    f"e.g. {', '.join(map(str, reversed(divisors)))}"
                )
    for axis, g in zip(GRID_AXES, grid):
        if g > 1 and axis not in used:
            raise GridError(
                f"{layer}: grid_dim {axis}={g}, but {spec.name} splits nothing along {axis}: every task would do "
                f"the same work; use {axis}=1"
            )
        shared = [
            a.name for a in args if a.writes and g > 1 and axis not in {x for _, x in (*a.partition.axes, *a.partition.selected)}
        ]
        if shared:
            raise GridError(
                f"{layer}: grid_dim {axis}={g}, but {spec.name} writes all of {shared} in every task along {axis}, so "
                f"those tasks would write the same elements; split the output along {axis} in the spec, or use {axis}=1"
            )
