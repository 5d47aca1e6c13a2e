"""The compiled task graph: typed, immutable, loaded once, read by every later stage.

``build_compiled`` makes it from a TaskGraph, its Schedule and its variants; ``to_json`` /
``from_json`` are the ``task_graph_rank{r}.json`` that ``compile(output_dir=...)`` writes and a replay
reads. ``from_json`` checks every field, so a damaged file is an error naming the field, never a
``KeyError`` deep inside the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import GraphError
from ..tasks.partition import CHOSEN_AT_RUN_TIME
from .schedule import Schedule
from .task_graph import TaskGraph
from .variants import Variant

FORMAT = "mpk-task-graph"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # dtypes.DType.short
    kind: str  # attached, intermediate or derived
    direction: str  # IN, OUT or INOUT


@dataclass(frozen=True, slots=True)
class ArgInfo:
    name: str
    tensor: str
    partition: str
    direction: str  # IN or OUT

    @property
    def runtime_disjoint(self) -> bool:
        """Whether the layer's tasks pick disjoint parts of it at run time (Partition.selected)."""
        return CHOSEN_AT_RUN_TIME in self.partition


@dataclass(frozen=True, slots=True)
class Scalar:
    """A descriptor scalar: an int or a float, kept apart because both travel as 32 bits."""

    value: int | float
    is_int: bool


@dataclass(frozen=True, slots=True)
class LayerInfo:
    id: int
    name: str
    task: str
    opcode: int
    grid: tuple[int, int, int]
    values: dict[str, Any]
    template_args: tuple[str, ...]
    scalars: tuple[Scalar, ...]
    first_task: int
    num_tasks: int
    args: tuple[ArgInfo, ...]

    @property
    def input_names(self) -> list[str]:
        return [a.name for a in self.args if a.direction == "IN"]

    @property
    def output_names(self) -> list[str]:
        return [a.name for a in self.args if a.direction == "OUT"]


@dataclass(frozen=True, slots=True)
class VariantInfo:
    id: int
    task: str
    call: str  # the C++ call of the body
    smem: str | None  # constexpr expression of its dynamic shared memory
    layers: tuple[str, ...]


class SliceRef(NamedTuple):  # named tuples: a graph has one per task and argument, cheap to make
    tensor: str
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    byte_offset: int


class TaskInfo(NamedTuple):
    id: int
    label: str
    layer: int
    variant: int
    grid_idx: tuple[int, int, int]
    inputs: tuple[SliceRef, ...]
    outputs: tuple[SliceRef, ...]
    deps: tuple[tuple[int, str], ...]  # (producer task, "raw" | "war" | "waw")
    worker: int
    wait_event: int | None
    triggers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EventInfo:
    id: int
    trigger_count: int
    producers: tuple[int, ...]
    consumers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    policy: str
    num_workers: int
    queues: tuple[tuple[int, ...], ...]
    end_trigger_count: int  # workers with a non-empty queue: END_OF_TASK_GRAPH's count per iteration
    events: tuple[EventInfo, ...]


@dataclass(frozen=True)
class CompiledGraph:
    arch: str
    rank: int
    tensors: tuple[TensorInfo, ...]
    layers: tuple[LayerInfo, ...]
    variants: tuple[VariantInfo, ...]
    tasks: tuple[TaskInfo, ...]
    schedule: ScheduleInfo

    def tensor(self, name: str) -> TensorInfo:
        for t in self.tensors:
            if t.name == name:
                return t
        raise GraphError(f"the graph has no tensor {name!r}; it has {', '.join(t.name for t in self.tensors)}")

    def layer_of(self, task: TaskInfo) -> LayerInfo:
        return self.layers[task.layer]

    def to_json(self, tasks: bool = True) -> dict:
        """The graph as JSON data (``tasks=False``: an empty task list, for compiled_writer)."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "arch": self.arch,
            "rank": self.rank,
            "tensors": [
                {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "kind": t.kind, "direction": t.direction}
                for t in self.tensors
            ],
            "layers": [
                {
                    "id": l.id,
                    "name": l.name,
                    "task": l.task,
                    "opcode": l.opcode,
                    "grid": list(l.grid),
                    "values": l.values,
                    "template_args": list(l.template_args),
                    "scalars": [{"i": s.value} if s.is_int else {"f": s.value} for s in l.scalars],
                    "first_task": l.first_task,
                    "num_tasks": l.num_tasks,
                    "args": [
                        {"name": a.name, "tensor": a.tensor, "partition": a.partition, "direction": a.direction} for a in l.args
                    ],
                }
                for l in self.layers
            ],
            "variants": [
                {"id": v.id, "task": v.task, "call": v.call, "smem": v.smem, "layers": list(v.layers)} for v in self.variants
            ],
            "tasks": [
                {
                    "id": t.id,
                    "label": t.label,
                    "layer": t.layer,
                    "variant": t.variant,
                    "grid_idx": list(t.grid_idx),
                    "inputs": [_slice_json(s) for s in t.inputs],
                    "outputs": [_slice_json(s) for s in t.outputs],
                    "deps": [{"task": d, "hazard": h} for d, h in t.deps],
                    "worker": t.worker,
                    "wait_event": t.wait_event,
                    "triggers": list(t.triggers),
                }
                for t in (self.tasks if tasks else ())
            ],
            "schedule": {
                "policy": self.schedule.policy,
                "num_workers": self.schedule.num_workers,
                "queues": [list(q) for q in self.schedule.queues],
                "end_of_task_graph": {
                    "counts": "one increment per worker with a non-empty queue, per iteration",
                    "trigger_count": self.schedule.end_trigger_count,
                },
                "events": [
                    {"id": e.id, "trigger_count": e.trigger_count, "producers": list(e.producers), "consumers": list(e.consumers)}
                    for e in self.schedule.events
                ],
            },
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "task graph") -> CompiledGraph:
        """Read and check a task graph JSON; GraphError naming ``where`` and the field otherwise."""
        from .compiled_reader import read_compiled

        return read_compiled(data, where)


def _slice_json(s: SliceRef) -> dict:
    return {"tensor": s.tensor, "lo": list(s.lo), "hi": list(s.hi), "byte_offset": s.byte_offset}


def build_compiled(
    graph: TaskGraph, schedule: Schedule, variants: list[Variant], variant_of_layer: dict[int, int], arch: str, rank: int
) -> CompiledGraph:
    """The typed compiled graph of a scheduled TaskGraph."""
    tensors = tuple(TensorInfo(t.name, t.shape, t.dtype.short, t.kind, t.direction) for t in graph.tensors.values())
    layers = tuple(
        LayerInfo(
            l.id,
            l.name,
            l.spec.name,
            l.spec.opcode,
            l.grid,
            dict(l.values),
            tuple(str(a) for a in l.template_args),
            tuple(Scalar(v, isinstance(v, int)) for v in l.scalars),
            l.first_task,
            l.num_tasks,
            tuple(ArgInfo(a.name, a.tensor.name, a.partition.describe(), "OUT" if a.writes else "IN") for a in l.args),
        )
        for l in graph.layers
    )
    variant_infos = tuple(VariantInfo(v.id, v.spec.name, v.call, v.smem, tuple(v.layers)) for v in variants)

    tasks = tuple(
        [
            TaskInfo(
                t.id,
                t.label,
                t.layer.id,
                variant_of_layer[t.layer.id],
                t.grid_idx,
                tuple([SliceRef(s.tensor.name, s.region.lo, s.region.hi, s.byte_offset) for s in t.reads]),
                tuple([SliceRef(s.tensor.name, s.region.lo, s.region.hi, s.byte_offset) for s in t.writes]),
                tuple(sorted(t.deps.items())),
                schedule.worker_of[t.id],
                schedule.wait_event[t.id],
                tuple(schedule.triggers[t.id]),
            )
            for t in graph.tasks
        ]
    )
    events = tuple(EventInfo(e.id, e.trigger_count, tuple(e.producers), tuple(e.consumers)) for e in schedule.events)
    info = ScheduleInfo(
        schedule.policy,
        schedule.num_workers,
        tuple(tuple(q) for q in schedule.queues),
        sum(1 for q in schedule.queues if q),
        events,
    )
    return CompiledGraph(arch, rank, tensors, layers, variant_infos, tasks, info)
