"""The task graph: layers in program order, each split into tasks with their slices and producers.

A layer call splits its tensors through the task's partition map into one slice per task; the
hazard tracker (dependencies.py) gives each task the earlier tasks it must not overtake.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import dtypes, memory
from ..contract import MAX_GRID, MAX_INPUTS, MAX_OUTPUTS
from ..errors import ArityError, GraphError, GridError
from ..tasks.partition import GRID_AXES, Arg, SliceInfo
from ..tasks.spec import TaskSpec, fits_descriptor
from ..tasks.spec_checks import checked_cost, checked_template_args
from .bulk import gc_paused
from .dependencies import Block, HazardTracker, LayerOrder
from .partition_checks import check_partitions
from .shuffle import shuffle
from .tensor_maps import tensor_maps
from .tensors import DTensor, MemoryIndex, Region, TensorSlice, check_new_tensor


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
        self._hazards = HazardTracker()
        self._order = LayerOrder()
        self._layer_counts: dict[str, int] = {}
        self._memory = MemoryIndex()

    # -- tensors ---------------------------------------------------------------------------------
    def add_tensor(self, data: torch.Tensor, name: str, kind: str) -> DTensor:
        check_new_tensor(data, name, self.tensors)
        t = DTensor(name, data, kind, self.id, len(self.tensors))  # its checks first: a refused tensor leaves no trace
        self._memory.add(data, name)
        self.tensors[name] = t
        return t

    def add_intermediate(self, dims: tuple[int, ...], dtype: torch.dtype, name: str, device: torch.device) -> DTensor:
        _check_declared(dims, dtype, name, "new_tensor", device)
        return self.add_tensor(torch.empty(tuple(dims), dtype=dtype, device=device), name, "intermediate")

    def add_comm(self, dims: tuple[int, ...], dtype: torch.dtype, name: str, world_size: int, device: torch.device) -> DTensor:
        """A tensor in the communication heap (see run/transport.py): a placeholder until compile()
        allocates the heap, where the other ranks can reach it."""
        _check_declared(dims, dtype, name, "new_comm_tensor", device)
        t = self.add_tensor(torch.empty(tuple(dims), dtype=dtype, device="meta"), name, "comm")
        t.comm_world_size = world_size
        return t

    def check_unchanged(self, when: str) -> None:
        """LayoutError if a tensor was resized or moved in place since it was attached."""
        for t in self.tensors.values():
            t.check_unchanged(when)

    def data(self, name: str) -> torch.Tensor:
        try:
            return self.tensors[name].data
        except KeyError:
            raise GraphError(f"no tensor named {name!r}; known: {', '.join(self.tensors)}") from None

    def add_workspace(self, dims: tuple[int, ...], dtype: torch.dtype, name: str, device: torch.device) -> DTensor:
        """Zeroed scratch of one layer (TaskSpec.workspace), used only by that layer's own tasks."""
        return self.add_tensor(torch.zeros(dims, dtype=dtype, device=device), name, "workspace")

    def next_layer_name(self, spec: TaskSpec) -> str:
        """The name add_layer will give the next layer of ``spec``."""
        return f"{spec.name}_{self._layer_counts.get(spec.name, 0)}"

    def add_shuffled(self, inputs: list[Any], shuffled_dim: int, num_groups: int, name: str) -> DTensor:
        """A derived tensor interleaving ``inputs`` (tensors of this graph) in groups (shuffle.py),
        computed now and recorded so that replays recompute it."""
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise GraphError(f"shuffle_tensors(): inputs={inputs!r} must be a non-empty list of tensors, e.g. [gate, up]")
        owned = [self.own(t, f"inputs[{i}]", "shuffle_tensors()") for i, t in enumerate(inputs)]
        for i, t in enumerate(owned):
            if t.kind not in ("attached", "derived"):
                raise GraphError(
                    f"shuffle_tensors(): inputs[{i}] {t!r} is a runtime-owned {t.kind} tensor, whose data a layer "
                    f"writes at run time; shuffle_tensors computes its result now, from its inputs' current data. "
                    f"Shuffle attached tensors (pk.attach_input), e.g. weights"
                )
        t = self.add_tensor(shuffle([t.data for t in owned], shuffled_dim, num_groups), name, "derived")
        t.derived_from = {
            "op": "shuffle_tensors",
            "inputs": [x.name for x in owned],
            "shuffled_dim": shuffled_dim,
            "num_groups": num_groups,
        }
        return t

    def add_tensor_maps(self, inputs: list[DTensor], box: list[int], swizzle: int, name: str) -> DTensor:
        """A derived tensor of TMA descriptors of ``inputs`` (tensor_maps.py), made now from their
        addresses and recorded so that replays make it again for the tensors they bind."""
        for t in inputs:
            if t.data.is_meta:
                raise GraphError(
                    f"{name}: tensor {t.name!r} has no memory (a meta tensor, or a communication tensor before "
                    f"compile()); a tensor map needs its address: attach the tensor with its memory"
                )
        t = self.add_tensor(tensor_maps([t.data for t in inputs], box, swizzle), name, "derived")
        t.derived_from = {"op": "tensor_maps", "inputs": [x.name for x in inputs], "box": list(box), "swizzle": swizzle}
        return t

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
    @gc_paused()
    def add_layer(self, spec: TaskSpec, grid: tuple[int, int, int], args: list[Arg], values: dict[str, Any]) -> Layer:
        name = self.next_layer_name(spec)
        num_in = sum(not a.writes for a in args)
        num_out = len(args) - num_in
        if num_in > MAX_INPUTS or num_out > MAX_OUTPUTS:
            raise ArityError(
                f"{name}: {num_in} inputs and {num_out} outputs per task; a task carries at most "
                f"{MAX_INPUTS} inputs and {MAX_OUTPUTS} outputs. Split the layer in two"
            )
        check_partitions(name, spec, grid, args)
        slices = {a.name: _slice_info(a, grid) for a in args}
        targs = checked_template_args(spec, slices, values, name)
        scalars = spec.scalar_values(values, slices)
        if len(scalars) > 2:
            raise ArityError(f"{name}: {spec.name} gives {len(scalars)} descriptor scalars; a descriptor carries 2")
        for i, v in enumerate(scalars):  # what a spec's own scalar_values gives, before it is packed into 32 bits
            if not fits_descriptor(v):
                raise GraphError(
                    f"{name}: {spec.name}.scalar_values gave {v!r} ({type(v).__name__}) as scalar {i}; a descriptor "
                    f"scalar is an int in int32 range (read with scalar_i) or a finite float within float32 range (scalar_f)"
                )
        layer = Layer(len(self.layers), name, spec, grid, values, args, targs, scalars, checked_cost(spec, slices, name))
        layer.first_task = len(self.tasks)
        self._order.begin_layer(layer.first_task, grid[0] * grid[1] * grid[2])
        self._hazards.begin_layer()
        cuts = [_Cut(a, grid) for a in args]
        for gz, gy, gx in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
            idx = (gx, gy, gz, 0)  # index 3 (axis -1): the block coordinate of an unsplit dim
            reads: list[TensorSlice] = []
            writes: list[TensorSlice] = []
            blocks: tuple[list[Block], list[Block]] = ([], [])
            for c in cuts:
                cell = c.cell(idx)
                lo = tuple(map(operator.mul, cell, c.size))
                region = Region(lo, tuple(map(operator.add, lo, c.size)))
                (writes if c.writes else reads).append(TensorSlice(c.tensor, region, sum(map(operator.mul, cell, c.unit))))
                blocks[c.writes].append(Block(c.name, c.size, cell, c.disjoint))
            task = Task(len(self.tasks), layer, idx[:3], reads, writes)
            task.deps = self._order.prune(self._hazards.add(task.id, *blocks))
            self.tasks.append(task)
        layer.num_tasks = len(self.tasks) - layer.first_task
        _check_in_place(layer)
        self._order.end_layer()
        for name in {a.tensor.name for a in args if a.writes}:  # the slices of a partition tile the tensor
            self._hazards.rewritten(name, layer.first_task)
        self._layer_counts[spec.name] = self._layer_counts.get(spec.name, 0) + 1
        for a in args:
            a.tensor.written |= a.writes
            a.tensor.read |= not a.writes
        self.layers.append(layer)
        return layer

    def dependents(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.tasks]
        for t in self.tasks:
            for p in t.deps:
                out[p].append(t.id)
        return out


def _check_declared(dims: object, dtype: object, name: str, what: str, device: torch.device) -> None:
    """GraphError / DTypeError / MemoryBudgetError for a runtime-owned tensor the runtime cannot make."""
    if not isinstance(dims, (tuple, list)) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        raise GraphError(f"{what} {name!r}: dims={dims!r} must be positive integers")
    dtypes.lookup(dtype)  # type: ignore[arg-type]
    memory.check([memory.tensor_need(f"{what} {name!r}", dims, dtype)], device, what, "use smaller dims")


def _check_in_place(layer: Layer) -> None:
    """GraphError for a layer that reads a tensor it also writes, unless the spec says that output
    may overwrite that input (TaskSpec.in_place): its tasks would read elements that other tasks, or
    they themselves, have already overwritten."""
    spec = layer.spec
    for o in layer.args:
        if not o.writes:
            continue
        for a in layer.args:
            if a.writes or a.tensor is not o.tensor or spec.allows_in_place(o.name, a.name):
                continue
            allowed = [f"{out} = {inp}" for out, inp in spec.in_place.items()]
            raise GraphError(
                f"{layer.name}: {spec.name} writes {o.tensor!r} as {o.name!r} while its tasks read it as {a.name!r}, so "
                f"they would read values already overwritten; pass a new tensor as {o.name} (pk.new_tensor(...)). "
                + (f"In place {spec.name} allows only {', '.join(allowed)}" if allowed else f"{spec.name} cannot run in place")
            )


class _Cut:
    """How a layer's partition cuts one argument: per dim of its tensor, the grid axis that splits
    it (-1: none) and the slice's extent. The task at grid index idx gets block ``cell`` (idx[axis]
    per split dim, 0 elsewhere): elements [cell * size, (cell + 1) * size), starting
    sum(cell * unit) bytes into the tensor."""

    def __init__(self, a: Arg, grid: tuple[int, int, int]):
        self.tensor, self.name, self.writes = a.tensor, a.tensor.name, a.writes
        self.disjoint = a.partition.runtime_disjoint  # the tasks pick disjoint parts at run time
        axes = [a.partition.axis_of(d) for d in range(a.tensor.num_dims)]
        self.axes = tuple(-1 if x is None else GRID_AXES.index(x) for x in axes)
        self.size = tuple(n if k < 0 else n // grid[k] for n, k in zip(a.tensor.shape, self.axes))
        self.unit = tuple(s * st * a.tensor.dtype.itemsize for s, st in zip(self.size, a.tensor.strides))
        # cell(idx) of an index (x, y, z, 0): the last entry stands for unsplit dims (axis -1).
        picks = [3 if k < 0 else k for k in self.axes]
        self.cell = operator.itemgetter(*picks) if len(picks) > 1 else (lambda idx, k=picks[0]: (idx[k],))


def _slice_info(a: Arg, grid: tuple[int, int, int]) -> SliceInfo:
    return SliceInfo(a.name, a.tensor.dtype, _Cut(a, grid).size, a.tensor.shape, a.tensor.strides)


def check_grid(grid_dim: Any, layer: str) -> tuple[int, int, int]:
    ok = (
        isinstance(grid_dim, (tuple, list))
        and len(grid_dim) == 3
        and all(isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= MAX_GRID for g in grid_dim)
    )
    if not ok:
        raise GridError(f"{layer}: grid_dim={grid_dim!r} must be three integers in [1, {MAX_GRID}], e.g. grid_dim=(16, 1, 1)")
    return (grid_dim[0], grid_dim[1], grid_dim[2])
