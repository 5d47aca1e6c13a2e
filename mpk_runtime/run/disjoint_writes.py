"""The promise of a selected partition, checked by the emulator: the tasks of a layer that pick their
part of an output at run time (the rows of request x, the units a task takes) never change the same
element.

The graph cannot order such tasks against each other, and their slices are the whole dimension, so
neither the slice checks nor the untouched-data checks see a task that writes into another's rows:
only the golden does, and only when the clobbering task happens to run last. Here every element a
task changes (its bytes differ after the task) is noted with the task, per layer and iteration; an
element that a second task of the same layer changes is reported with both, whichever order they ran.
A write of the value already there goes unseen, as it changes nothing.
"""

from __future__ import annotations

import torch

from ..graph.compiled import CompiledGraph, TaskInfo
from ..tasks import registry


class DisjointWrites:
    """The selected outputs of ``graph``'s layers, watched through ``views`` (the tensors as the
    task bodies see them): ``before`` a task, ``after`` it, ``new_iteration`` between iterations."""

    def __init__(self, graph: CompiledGraph, views: dict[str, torch.Tensor]):
        self.graph, self.views = graph, views
        self.watched = {
            layer.id: [a.tensor for a in layer.args if a.direction == "OUT" and a.runtime_disjoint]
            for layer in graph.layers
            if not registry.get(layer.task).cross_rank  # peers write those parts: not this rank's tasks
        }
        self.writers: dict[tuple[int, str], torch.Tensor] = {}  # (layer, tensor) -> task id per element, or -1

    def new_iteration(self) -> None:
        self.writers.clear()

    def before(self, task: TaskInfo) -> list[tuple[str, torch.Tensor]]:
        return [(name, self.views[name].clone()) for name in self.watched.get(task.layer, ())]

    def after(self, task: TaskInfo, before: list[tuple[str, torch.Tensor]]) -> str | None:
        """What ``task`` changed that another task of its layer changed earlier this iteration (None: nothing)."""
        for name, old in before:
            new = self.views[name]
            changed = _changed(old, new)
            if not changed.any():
                continue
            writers = self.writers.setdefault((task.layer, name), torch.full(new.shape, -1, dtype=torch.int32))
            clash = changed & (writers >= 0)
            if clash.any():
                index = tuple(int(i) for i in clash.nonzero()[0])
                other = self.graph.tasks[int(writers[index])]
                layer = self.graph.layers[task.layer]
                return (
                    f"{name}[{', '.join(map(str, index))}] changed by task {task.id} ({task.label}), which task "
                    f"{other.id} ({other.label}) of the same layer changed earlier in this iteration: layer "
                    f"{layer.name} picks its part of {name} at run time (a selected partition), and its tasks must "
                    f"never touch the same elements ({int(clash.sum())} element(s) changed by both)"
                )
            writers[changed] = task.id
        return None


def _changed(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Per element: whether any of its bytes differ (NaN and -0.0 compared as bits)."""
    size = new.element_size()
    a = old.reshape(-1).view(torch.uint8).view(-1, size)
    b = new.reshape(-1).view(torch.uint8).view(-1, size)
    return (a != b).any(1).view(new.shape)
