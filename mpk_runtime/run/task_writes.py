"""What each task of a layer changes in the layer's outputs, checked by the emulator after the task:
within its output slice, and, where the tasks pick their parts at run time (a selected partition:
the rows of request x, the units a task takes), never an element another task of the layer changed.

The seeded order of the workers shows a task that writes outside its slice only when the owner of
those elements runs first and the golden then sees the clobbered values; here a changed element
outside the slice is reported at once, with its owner, in the default run (``--mpk-emulate-check``
also sees a write of the value already there, and names the thread and line). A selected output's
slice is the whole dimension, so for it every element a task changes is noted with the task, per
layer and iteration, and an element a second task of the layer changes is reported with both,
whichever ran first. A write of the value already there changes nothing and goes unseen.
"""

from __future__ import annotations

import torch

from ..graph.compiled import CompiledGraph, SliceRef, TaskInfo
from ..tasks import registry


class TaskWrites:
    """The outputs of ``graph``'s layers, watched through ``views`` (the tensors as the task bodies
    see them): ``before`` a task, ``after`` it, ``new_iteration`` between iterations."""

    def __init__(self, graph: CompiledGraph, views: dict[str, torch.Tensor]):
        self.graph, self.views = graph, views
        self.selected = {
            layer.id: {a.tensor for a in layer.args if a.direction == "OUT" and a.runtime_disjoint} for layer in graph.layers
        }
        # Cross-rank tasks are left alone: the peers write parts of their outputs.
        self.watched = {layer.id: not registry.get(layer.task).cross_rank for layer in graph.layers}
        self.writers: dict[tuple[int, str], torch.Tensor] = {}  # (layer, tensor) -> task id per element, or -1

    def new_iteration(self) -> None:
        self.writers.clear()

    def before(self, task: TaskInfo) -> list[tuple[SliceRef, torch.Tensor]]:
        if not self.watched[task.layer]:
            return []
        return [(s, self.views[s.tensor].clone()) for s in task.outputs if s.tensor in self.views]

    def after(self, task: TaskInfo, before: list[tuple[SliceRef, torch.Tensor]]) -> str | None:
        """What ``task`` changed outside its output slice, or in a selected output where another task
        of its layer changed it earlier this iteration (None: nothing)."""
        for s, old in before:
            new = self.views[s.tensor]
            changed = changed_elements(old, new)
            if not changed.any():
                continue
            if s.tensor in self.selected[task.layer]:
                found = self._overlap(task, s.tensor, changed)
            else:
                outside = changed.clone()
                outside[tuple(slice(lo, hi) for lo, hi in zip(s.lo, s.hi))] = False
                found = self._outside(task, s, outside) if outside.any() else None
            if found is not None:
                return found
        return None

    def _outside(self, task: TaskInfo, s: SliceRef, outside: torch.Tensor) -> str:
        index = tuple(int(i) for i in outside.nonzero()[0])
        owners = [
            t
            for t in self.graph.tasks
            if t.layer == task.layer
            for o in t.outputs
            if o.tensor == s.tensor and all(lo <= i < hi for i, lo, hi in zip(index, o.lo, o.hi))
        ]
        owner = f", which is task {owners[0].id}'s ({owners[0].label})" if owners else ""
        return (
            f"{s.tensor}[{_at(index)}] changed by task {task.id} ({task.label}), outside its output slice "
            f"{s.tensor}[{', '.join(f'{lo}:{hi}' for lo, hi in zip(s.lo, s.hi))}]{owner} "
            f"({int(outside.sum())} element(s) outside it changed); --mpk-emulate-check names the thread and line"
        )

    def _overlap(self, task: TaskInfo, name: str, changed: torch.Tensor) -> str | None:
        writers = self.writers.setdefault((task.layer, name), torch.full(changed.shape, -1, dtype=torch.int32))
        clash = changed & (writers >= 0)
        if clash.any():
            index = tuple(int(i) for i in clash.nonzero()[0])
            other = self.graph.tasks[int(writers[index])]
            layer = self.graph.layers[task.layer]
            return (
                f"{name}[{_at(index)}] changed by task {task.id} ({task.label}), which task {other.id} ({other.label}) "
                f"of the same layer changed earlier in this iteration: layer {layer.name} picks its part of {name} at "
                f"run time (a selected partition), and its tasks must never touch the same elements "
                f"({int(clash.sum())} element(s) changed by both)"
            )
        writers[changed] = task.id
        return None


def _at(index: tuple[int, ...]) -> str:
    return ", ".join(map(str, index))


def changed_elements(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Per element: whether any of its bytes differ (NaN and -0.0 compared as bits)."""
    size = new.element_size()
    a = old.reshape(-1).view(torch.uint8).view(-1, size)
    b = new.reshape(-1).view(torch.uint8).view(-1, size)
    return (a != b).any(1).view(new.shape)
