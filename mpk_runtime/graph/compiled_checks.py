"""What a task graph read back must satisfy beyond the types of its fields (compiled_reader.py
checks those): every fact that the kernel, the emulator or the upload relies on, so that a damaged
or hand-edited file is refused with the field that is wrong, never run with a slice outside its
tensor, a dependency nothing waits for, or a worker that waits forever.

- the arch and the placement policy: known ones; each variant's layers: layers of the graph, of its
  task and template arguments, in no other variant;
- tensors: unique names, known dtypes and kinds;
- layers: numbered in order, their tasks contiguous, as many as the grid has blocks, at most the
  inputs, outputs and scalars a descriptor carries, grids that divide the dimensions they split;
- tasks: in their layer's range, a grid index inside the grid, and exactly the slices the layer's
  partitions give that grid index (so inside the tensor), with the byte offsets of a contiguous
  tensor; a variant that holds the task's layer;
- schedule: queues in program order (a worker never waits on a task queued behind it), the end
  count, events whose trigger counts, producers and consumers agree with the tasks' triggers and
  waits, producers before consumers, and every dependency ordered: its producer runs earlier on
  the same worker, or is one of the producers of the event the task waits on.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .. import archs, contract, dtypes
from ..errors import GraphError
from ..tasks.partition import CHOSEN_AT_RUN_TIME
from .compiled import CompiledGraph, LayerInfo, SliceRef, TaskInfo, TensorInfo
from .schedule import POLICIES

KINDS = ("attached", "intermediate", "workspace", "derived", "comm")
_SPLIT = re.compile(r"^dim (\d+) by grid ([xyz])$")
_SELECTED = re.compile(rf"^dim (\d+) {re.escape(CHOSEN_AT_RUN_TIME)} ([xyz])$")  # the task sees the whole dim


def check_compiled(g: CompiledGraph, where: str) -> None:
    def fail(path: str, what: str) -> GraphError:
        return GraphError(f"{where}: {path}: {what}")

    if g.arch not in archs.NAMES:
        raise fail("arch", f"unknown arch {g.arch!r}; expected one of {', '.join(archs.NAMES)}")
    if g.schedule.policy not in POLICIES:
        raise fail("schedule.policy", f"unknown policy {g.schedule.policy!r}; expected one of {', '.join(POLICIES)}")
    _check_variants(g, fail)
    tensors = _check_tensors(g, fail)
    cuts = [_check_layer(g, i, tensors, fail) for i in range(len(g.layers))]
    for t in g.tasks:
        _check_task(g, t, tensors, cuts[t.layer], fail)
    _check_schedule(g, fail)


Fail = Callable[[str, str], GraphError]


def _check_variants(g: CompiledGraph, fail: Fail) -> None:
    """A variant is one instantiation: its layers are layers of its task with the same template
    arguments (the dispatcher instantiates its first layer's), and no layer is in two variants."""
    layers = {layer.name: layer for layer in g.layers}
    owner: dict[str, int] = {}
    for v in g.variants:
        path = f"variants[{v.id}].layers"
        unknown = [n for n in v.layers if n not in layers]
        if not v.layers:
            raise fail(path, "names no layer; a variant is made for the layers that use it")
        if unknown:
            raise fail(path, f"names layers {unknown}, which the graph does not have")
        other = [n for n in v.layers if layers[n].task != v.task]
        if other:
            raise fail(path, f"names {other}, which are not {v.task} layers")
        targs = sorted({", ".join(layers[n].template_args) for n in v.layers})
        if len(targs) > 1:
            raise fail(path, f"names layers of different template arguments (<{'>, <'.join(targs)}>); one variant is one set")
        twice = [n for n in v.layers if n in owner]
        if twice:
            raise fail(path, f"names {twice}, which variants[{owner[twice[0]]}] names too")
        owner.update((n, v.id) for n in v.layers)


def _check_tensors(g: CompiledGraph, fail: Fail) -> dict[str, TensorInfo]:
    seen: dict[str, TensorInfo] = {}
    for i, t in enumerate(g.tensors):
        if t.name in seen:
            raise fail(f"tensors[{i}].name", f"tensor {t.name!r} is listed twice")
        if t.dtype not in dtypes.SHORT_NAMES:
            raise fail(f"tensors[{i}].dtype", f"unknown dtype {t.dtype!r}; expected one of {', '.join(dtypes.SHORT_NAMES)}")
        if t.kind not in KINDS:
            raise fail(f"tensors[{i}].kind", f"expected one of {', '.join(KINDS)}, got {t.kind!r}")
        seen[t.name] = t
    return seen


def _check_layer(g: CompiledGraph, i: int, tensors: dict[str, TensorInfo], fail: Fail) -> list[list[tuple[int, int]]]:
    """The layer's cuts: per argument, per tensor dim, (grid axis or -1, the slice's extent)."""
    layer, path = g.layers[i], f"layers[{i}]"
    first = g.layers[i - 1].first_task + g.layers[i - 1].num_tasks if i else 0
    if layer.first_task != first:
        raise fail(f"{path}.first_task", f"{layer.first_task}, but the layers before it end at task {first}")
    blocks = layer.grid[0] * layer.grid[1] * layer.grid[2]
    if layer.num_tasks != blocks:
        raise fail(f"{path}.num_tasks", f"{layer.num_tasks}, but grid {list(layer.grid)} has {blocks} blocks")
    if any(not 1 <= x <= contract.MAX_GRID for x in layer.grid):
        raise fail(f"{path}.grid", f"{list(layer.grid)}: each must be in [1, {contract.MAX_GRID}]")
    ins, outs = len(layer.input_names), len(layer.output_names)
    if ins + outs != len(layer.args) or ins > contract.MAX_INPUTS or outs > contract.MAX_OUTPUTS:
        raise fail(
            f"{path}.args",
            f"{ins} IN and {outs} OUT arguments of {len(layer.args)}; a task carries at most "
            f"{contract.MAX_INPUTS} inputs and {contract.MAX_OUTPUTS} outputs, each IN or OUT",
        )
    if len(layer.scalars) > contract.MAX_SCALARS:
        raise fail(f"{path}.scalars", f"{len(layer.scalars)} scalars; a descriptor carries {contract.MAX_SCALARS}")
    cuts = []
    for k, a in enumerate(layer.args):
        shape = tensors[a.tensor].shape
        cut = [(-1, n) for n in shape]
        parts = [] if a.partition in ("", "whole") else a.partition.split(", ")
        for part in parts:
            chosen = _SELECTED.match(part)
            if chosen and int(chosen.group(1)) < len(shape):
                continue  # its slice is the whole dimension
            m = _SPLIT.match(part)
            dim, axis = (int(m.group(1)), "xyz".index(m.group(2))) if m else (len(shape), 0)
            if dim >= len(shape) or shape[dim] % layer.grid[axis]:
                raise fail(
                    f"{path}.args[{k}].partition",
                    f"{a.partition!r} does not cut tensor {a.tensor!r} {list(shape)} with grid {list(layer.grid)}",
                )
            cut[dim] = (axis, shape[dim] // layer.grid[axis])
        cuts.append(cut)
    return cuts


def _check_task(g: CompiledGraph, t: TaskInfo, tensors: dict[str, TensorInfo], cuts: list, fail: Fail) -> None:
    layer: LayerInfo = g.layers[t.layer]
    path = f"tasks[{t.id}]"
    if not layer.first_task <= t.id < layer.first_task + layer.num_tasks:
        raise fail(
            f"{path}.layer",
            f"{t.layer}, but layer {layer.name} holds tasks {layer.first_task}..{layer.first_task + layer.num_tasks - 1}",
        )
    (x, y, z), (gx, gy, _) = t.grid_idx, layer.grid
    if any(i >= n for i, n in zip(t.grid_idx, layer.grid)) or layer.first_task + x + gx * (y + gy * z) != t.id:
        raise fail(
            f"{path}.grid_idx",
            f"{list(t.grid_idx)}, but task {t.id - layer.first_task} of layer {layer.name} "
            f"(grid {list(layer.grid)}, x fastest) has grid index {_index_of(t.id - layer.first_task, layer.grid)}",
        )
    if g.variants[t.variant].task != layer.task:
        raise fail(
            f"{path}.variant", f"{t.variant} is a {g.variants[t.variant].task} variant; layer {layer.name} is {layer.task}"
        )
    if layer.name not in g.variants[t.variant].layers:
        raise fail(f"{path}.variant", f"{t.variant}, whose layers {list(g.variants[t.variant].layers)} leave out {layer.name}")
    for kind, slices, direction in (("inputs", t.inputs, "IN"), ("outputs", t.outputs, "OUT")):
        args = [(a, cut) for a, cut in zip(layer.args, cuts) if a.direction == direction]
        if len(slices) != len(args):
            raise fail(f"{path}.{kind}", f"{len(slices)} slices for the {len(args)} {direction} arguments of {layer.name}")
        for k, (s, (a, cut)) in enumerate(zip(slices, args)):
            _check_slice(s, a.tensor, a.name, cut, t.grid_idx, tensors[a.tensor], f"{path}.{kind}[{k}]", fail)


def _index_of(k: int, grid: tuple[int, int, int]) -> list[int]:
    return [k % grid[0], k // grid[0] % grid[1], k // (grid[0] * grid[1])]


def _check_slice(s: SliceRef, tensor: str, arg: str, cut: list, idx: tuple, info: TensorInfo, path: str, fail: Fail) -> None:
    if s.tensor != tensor:
        raise fail(f"{path}.tensor", f"{s.tensor!r}, but the layer passes {tensor!r} as {arg!r}")
    lo = tuple(0 if axis < 0 else idx[axis] * step for axis, step in cut)
    hi = tuple(a + step for a, (_, step) in zip(lo, cut))
    if (s.lo, s.hi) != (lo, hi):
        raise fail(
            path,
            f"lo={list(s.lo)} hi={list(s.hi)}, but {arg!r} of {tensor!r} {list(info.shape)} is cut to "
            f"lo={list(lo)} hi={list(hi)} at grid index {list(idx)}",
        )
    stride, offset = 1, 0
    for a, n in zip(reversed(lo), reversed(info.shape)):
        offset += a * stride
        stride *= n
    offset *= dtypes.from_short(info.dtype).itemsize
    if s.byte_offset != offset:
        raise fail(f"{path}.byte_offset", f"{s.byte_offset}, but lo={list(lo)} of {info.dtype} {list(info.shape)} is at {offset}")


def _check_schedule(g: CompiledGraph, fail: Fail) -> None:
    sched, n = g.schedule, len(g.tasks)
    for w, q in enumerate(sched.queues):
        if any(a >= b for a, b in zip(q, q[1:])):
            raise fail(f"schedule.queues[{w}]", "must list its tasks in increasing order (program order)")
    busy = sum(1 for q in sched.queues if q)
    if sched.end_trigger_count != busy:
        raise fail("schedule.end_of_task_graph.trigger_count", f"{sched.end_trigger_count}, but {busy} workers have tasks")
    triggered: list[set[int]] = [set() for _ in range(n)]
    waiting: list[list[int]] = [[] for _ in sched.events]
    for e in sched.events:
        path = f"schedule.events[{e.id}]"
        if e.trigger_count != len(e.producers) or len(set(e.producers)) != len(e.producers):
            raise fail(f"{path}.trigger_count", f"{e.trigger_count}, but the event has {len(set(e.producers))} producers")
        if e.producers and e.consumers and max(e.producers) >= min(e.consumers):
            raise fail(f"{path}", f"consumer task {min(e.consumers)} does not come after producer {max(e.producers)}")
        for p in e.producers:
            triggered[p].add(e.id)
    for t in g.tasks:
        if set(t.triggers) != triggered[t.id] or len(t.triggers) != len(triggered[t.id]):
            raise fail(
                f"tasks[{t.id}].triggers", f"{list(t.triggers)}, but the task produces for events {sorted(triggered[t.id])}"
            )
        if t.wait_event is not None:
            waiting[t.wait_event].append(t.id)
        producers = set(sched.events[t.wait_event].producers) if t.wait_event is not None else set()
        for d, hazard in t.deps:
            if not (g.tasks[d].worker == t.worker or d in producers):
                raise fail(
                    f"tasks[{t.id}].deps",
                    f"task {d} ({hazard}) runs on worker {g.tasks[d].worker}, task "
                    f"{t.id} on worker {t.worker}, and no event it waits on counts task {d}: nothing orders them",
                )
    for e in sched.events:
        if sorted(e.consumers) != waiting[e.id]:
            raise fail(f"schedule.events[{e.id}].consumers", f"{list(e.consumers)}, but tasks {waiting[e.id]} wait on it")
