"""The task graph: tensors, per-task slices (regions), layers, tasks and their dependencies.

A layer call splits its tensors through the task's partition map into one slice per task. A task
depends on every earlier task whose slice it must not overtake: read-after-write, and also
write-after-read and write-after-write, so that layers updating a tensor in place stay correct.
Program order is a topological order of the result, which the scheduler relies on.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from . import dtypes
from .errors import ArityError, GraphError, GridError, LayoutError, NameConflictError
from .tasks.registry import GRID_AXES, MAX_INPUTS, MAX_OUTPUTS, Arg, SliceInfo, TaskSpec

MAX_GRID = 65535  # grid indices travel as uint16 in the task descriptor


class DTensor:
    """A tensor known to one PersistentKernel: an attached user tensor or a runtime intermediate."""

    def __init__(self, name: str, data: torch.Tensor, kind: str, graph_id: int, index: int):
        self.name = name
        self.data = data
        self.kind = kind  # "attached", "intermediate" or "derived" (computed from attached tensors, e.g. shuffled)
        self.derived_from: dict | None = None
        self.shape = tuple(data.shape)
        self.dtype = dtypes.lookup(data.dtype)
        self.strides = tuple(data.stride())
        self._graph_id = graph_id
        self.index = index
        self.read = False
        self.written = False

    @property
    def num_dims(self) -> int:
        return len(self.shape)

    @property
    def direction(self) -> str:
        """IN, OUT or INOUT, from how the graph's tasks use the tensor."""
        if self.written:
            return "INOUT" if self.read else "OUT"
        return "IN"

    def __repr__(self) -> str:
        return f"DTensor({self.name!r}, shape={self.shape}, dtype={self.dtype.short})"


@dataclass(frozen=True)
class Region:
    """A half-open box ``[lo, hi)`` of a tensor's index space."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    def overlaps(self, other: Region) -> bool:
        return all(a < d and c < b for a, b, c, d in zip(self.lo, self.hi, other.lo, other.hi))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in zip(self.lo, self.hi))


@dataclass(frozen=True)
class TensorSlice:
    tensor: DTensor
    region: Region

    @property
    def byte_offset(self) -> int:
        return sum(lo * st for lo, st in zip(self.region.lo, self.tensor.strides)) * self.tensor.dtype.itemsize

    def to_json(self) -> dict:
        return {"tensor": self.tensor.name, "lo": list(self.region.lo), "hi": list(self.region.hi),
                "byte_offset": self.byte_offset}


@dataclass
class Layer:
    id: int
    name: str
    spec: TaskSpec
    grid: tuple[int, int, int]
    values: dict[str, Any]  # scalars and options after defaults
    args: list[Arg]
    template_args: list[Any]
    scalars: list[float | int]
    cost_ns: float
    first_task: int = 0
    num_tasks: int = 0


@dataclass
class Task:
    id: int
    layer: Layer
    grid_idx: tuple[int, int, int]
    reads: list[TensorSlice]
    writes: list[TensorSlice]
    deps: dict[int, str] = field(default_factory=dict)  # producer task id -> "raw" | "war" | "waw"

    @property
    def label(self) -> str:
        x, y, z = self.grid_idx
        return f"{self.layer.name}[{x},{y},{z}]" if (y or z) else f"{self.layer.name}[{x}]"


class TaskGraph:
    """Tensors and layers in program order, split into tasks with their dependencies."""

    _ids = itertools.count()

    def __init__(self) -> None:
        self.id = next(self._ids)
        self.tensors: dict[str, DTensor] = {}
        self.layers: list[Layer] = []
        self.tasks: list[Task] = []
        # Per tensor, the (task id, region) of every earlier read and write, for hazard analysis.
        self._reads: dict[str, list[tuple[int, Region]]] = {}
        self._writes: dict[str, list[tuple[int, Region]]] = {}
        self._layer_counts: dict[str, int] = {}
        self._memory: dict[str, tuple[list[int], list[tuple[int, int, str]]]] = {}  # device -> sorted ranges

    # -- tensors ---------------------------------------------------------------------------------
    def add_tensor(self, data: torch.Tensor, name: str, kind: str) -> DTensor:
        if not isinstance(name, str) or not name:
            raise GraphError(f"tensor name must be a non-empty string, got {name!r}")
        if name in self.tensors:
            raise NameConflictError(
                f"a tensor named {name!r} is already attached ({self.tensors[name]!r}); give each tensor a unique name"
            )
        if not isinstance(data, torch.Tensor):
            raise GraphError(f"tensor {name!r} must be a torch.Tensor, got {type(data).__name__}")
        if not data.is_contiguous():
            raise LayoutError(
                f"tensor {name!r} with shape {tuple(data.shape)} and strides {data.stride()} is not contiguous; "
                f"pass tensor.contiguous()"
            )
        if data.dim() == 0:
            raise GraphError(f"tensor {name!r} is a 0-d scalar; attach it as shape (1,) with tensor.reshape(1)")
        self._check_no_alias(data, name)
        t = DTensor(name, data, kind, self.id, len(self.tensors))
        self.tensors[name] = t
        return t

    def _check_no_alias(self, data: torch.Tensor, name: str) -> None:
        """Dependencies are tracked per tensor, so two attached tensors must not share memory: a write
        through one would not order a read through the other. Attached ranges never overlap, so a
        sorted index per device answers with the two neighbours of the new range."""
        if data.device.type == "meta" or data.numel() == 0:
            return
        lo = data.data_ptr()
        hi = lo + data.numel() * data.element_size()
        starts, spans = self._memory.setdefault(str(data.device), ([], []))
        i = bisect.bisect_left(starts, lo)
        for j in (i - 1, i):
            if 0 <= j < len(starts) and spans[j][0] < hi and lo < spans[j][1]:
                raise GraphError(
                    f"tensor {name!r} shares memory with {spans[j][2]!r} (the same tensor, or views of one storage); "
                    f"attach each buffer once and pass the same handle to every layer that uses it"
                )
        starts.insert(i, lo)
        spans.insert(i, (lo, hi, name))

    def own(self, value: Any, arg: str, layer: str) -> DTensor:
        """``value`` as a tensor of this graph, or a GraphError that says how to attach it."""
        if isinstance(value, DTensor):
            if value._graph_id != self.id or self.tensors.get(value.name) is not value:
                raise GraphError(f"{layer}: argument {arg!r} ({value!r}) belongs to another PersistentKernel")
            return value
        if isinstance(value, torch.Tensor):
            raise GraphError(
                f"{layer}: argument {arg!r} is a plain torch.Tensor; attach it first: "
                f"{arg} = pk.attach_input(tensor, name={arg!r})"
            )
        raise GraphError(f"{layer}: argument {arg!r} must be a tensor from pk.attach_input / pk.new_tensor, got {value!r}")

    # -- layers ----------------------------------------------------------------------------------
    def add_layer(self, spec: TaskSpec, grid: tuple[int, int, int], args: list[Arg], values: dict[str, Any]) -> Layer:
        name = f"{spec.name}_{self._layer_counts.get(spec.name, 0)}"
        num_in = sum(not a.writes for a in args)
        num_out = len(args) - num_in
        if num_in > MAX_INPUTS or num_out > MAX_OUTPUTS:
            raise ArityError(
                f"{name}: {num_in} inputs and {num_out} outputs per task; a task carries at most "
                f"{MAX_INPUTS} inputs and {MAX_OUTPUTS} outputs. Split the layer in two"
            )
        _check_partitions(name, spec, grid, args)
        slices = {a.name: _slice_info(a, grid) for a in args}
        targs = spec.template_args(slices, values)
        scalars = spec.scalar_values(values, slices)
        if len(scalars) > 2:
            raise ArityError(f"{name}: {spec.name} gives {len(scalars)} descriptor scalars; a descriptor carries 2")
        layer = Layer(len(self.layers), name, spec, grid, values, args, targs, scalars, spec.cost_ns(slices))
        layer.first_task = len(self.tasks)
        for gz, gy, gx in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
            idx = (gx, gy, gz)
            reads = [TensorSlice(a.tensor, _region(a, grid, idx)) for a in args if not a.writes]
            writes = [TensorSlice(a.tensor, _region(a, grid, idx)) for a in args if a.writes]
            self._add_task(Task(len(self.tasks), layer, idx, reads, writes))
        layer.num_tasks = len(self.tasks) - layer.first_task
        self._layer_counts[spec.name] = self._layer_counts.get(spec.name, 0) + 1
        for a in args:
            a.tensor.written |= a.writes
            a.tensor.read |= not a.writes
        self.layers.append(layer)
        return layer

    def _add_task(self, task: Task) -> None:
        deps = task.deps
        for s in task.reads:
            for tid, reg in self._writes.get(s.tensor.name, ()):
                if reg.overlaps(s.region):
                    deps.setdefault(tid, "raw")
        for s in task.writes:
            for tid, reg in self._writes.get(s.tensor.name, ()):
                if reg.overlaps(s.region):
                    deps.setdefault(tid, "waw")
            for tid, reg in self._reads.get(s.tensor.name, ()):
                if reg.overlaps(s.region):
                    deps.setdefault(tid, "war")
        for s in task.reads:
            self._reads.setdefault(s.tensor.name, []).append((task.id, s.region))
        for s in task.writes:
            self._writes.setdefault(s.tensor.name, []).append((task.id, s.region))
        self.tasks.append(task)

    def dependents(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.tasks]
        for t in self.tasks:
            for p in t.deps:
                out[p].append(t.id)
        return out

    def to_json(self) -> dict:
        return {
            "tensors": [
                {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.short, "kind": t.kind,
                 "direction": t.direction}
                for t in self.tensors.values()
            ],
            "layers": [
                {"id": l.id, "name": l.name, "task": l.spec.name, "opcode": l.spec.opcode, "grid": list(l.grid),
                 "values": l.values, "template_args": [str(a) for a in l.template_args],
                 "scalars": [{"i": v} if isinstance(v, int) else {"f": v} for v in l.scalars],
                 "first_task": l.first_task, "num_tasks": l.num_tasks,
                 "args": [{"name": a.name, "tensor": a.tensor.name, "partition": a.partition.describe(),
                           "direction": "OUT" if a.writes else "IN"} for a in l.args]}
                for l in self.layers
            ],
        }


def _check_partitions(layer: str, spec: TaskSpec, grid: tuple[int, int, int], args: list[Arg]) -> None:
    used = set()
    for a in args:
        for dim, axis in a.partition.axes:
            used.add(axis)
            if dim >= a.tensor.num_dims:
                raise GridError(
                    f"{layer}: {spec.name} splits dim {dim} of {a.name!r}, but {a.tensor!r} has only "
                    f"{a.tensor.num_dims} dims"
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


def _region(a: Arg, grid: tuple[int, int, int], idx: tuple[int, int, int]) -> Region:
    lo, hi = [], []
    for dim, size in enumerate(a.tensor.shape):
        axis = a.partition.axis_of(dim)
        if axis is None:
            lo.append(0)
            hi.append(size)
        else:
            k = GRID_AXES.index(axis)
            step = size // grid[k]
            lo.append(idx[k] * step)
            hi.append((idx[k] + 1) * step)
    return Region(tuple(lo), tuple(hi))


def _slice_info(a: Arg, grid: tuple[int, int, int]) -> SliceInfo:
    region = _region(a, grid, (0, 0, 0))
    return SliceInfo(a.name, a.tensor.dtype, region.shape, a.tensor.shape, a.tensor.strides)


def check_grid(grid_dim: Any, layer: str) -> tuple[int, int, int]:
    ok = (
        isinstance(grid_dim, (tuple, list))
        and len(grid_dim) == 3
        and all(isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= MAX_GRID for g in grid_dim)
    )
    if not ok:
        raise GridError(
            f"{layer}: grid_dim={grid_dim!r} must be three integers in [1, {MAX_GRID}], e.g. grid_dim=(16, 1, 1)"
        )
    return tuple(grid_dim)  # type: ignore[return-value]
