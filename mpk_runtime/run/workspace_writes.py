"""Plain writes that two tasks of one layer make to the same words of the layer's workspace, found by
the emulator after each task.

A layer's tasks have no dependency on one another, so on the GPU any two of them can run at once. A
workspace word that several of them change is shared by design only when every change is atomic (a
split count): a plain store into a word another task of the layer also stores into is a race, e.g.
a scratch row every task uses where each needs its own (index it by the task's grid index). The
emulator runs one task at a time, so the race itself never shows in its results: each task finds
the scratch as it left it. Here each task's changes to the workspace are noted per iteration, with
the words it updated atomically (the emulator's note_atomic, csrc/emulation/shim_api.h); a word
that a second task changes with a plain store is reported with both tasks, whichever ran first. A
store of the value already there changes nothing and goes unseen.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..graph.compiled import CompiledGraph, TaskInfo
from .task_writes import changed_elements


class WorkspaceWrites:
    """The workspaces of ``graph``'s layers, watched through ``views`` (the tensors as the task bodies
    see them, at the addresses ``pointers`` gives): ``before`` a task, ``after`` it, ``new_iteration``
    between iterations."""

    def __init__(self, graph: CompiledGraph, views: dict[str, torch.Tensor], pointers: dict[str, int]):
        self.graph, self.views, self.pointers = graph, views, pointers
        scratch = {t.name for t in graph.tensors if t.kind == "workspace"}
        self.scratch_of = {t.id: sorted({s.tensor for s in t.inputs if s.tensor in scratch}) for t in graph.tasks}
        self.writers: dict[str, torch.Tensor] = {}  # workspace -> the task that changed each element, or -1
        self.atomic: dict[str, torch.Tensor] = {}  # workspace -> elements some task changed atomically

    def new_iteration(self) -> None:
        self.writers.clear()
        self.atomic.clear()

    def before(self, task: TaskInfo) -> list[tuple[str, torch.Tensor]]:
        return [(name, self.views[name].clone()) for name in self.scratch_of[task.id]]

    def after(
        self, task: TaskInfo, before: list[tuple[str, torch.Tensor]], atomic_words: Sequence[tuple[int, int]]
    ) -> str | None:
        """A workspace element that ``task`` changed with a plain store and another task of its layer
        changed earlier this iteration (None: none)."""
        for name, old in before:
            new = self.views[name]
            changed = changed_elements(old, new).reshape(-1)
            atomic = self.atomic.setdefault(name, torch.zeros(new.numel(), dtype=torch.bool))
            atomic |= self._elements(name, atomic_words)
            writers = self.writers.setdefault(name, torch.full((new.numel(),), -1, dtype=torch.int32))
            clash = changed & (writers >= 0) & (writers != task.id) & ~atomic
            if clash.any():
                return self._report(task, name, clash, writers)
            writers[changed] = task.id
        return None

    def _elements(self, name: str, words: Sequence[tuple[int, int]]) -> torch.Tensor:
        """The elements of workspace ``name`` that the (address, bytes) words overlap."""
        view = self.views[name]
        size, base = view.element_size(), self.pointers[name]
        end = base + view.numel() * size
        hit = torch.zeros(view.numel(), dtype=torch.bool)
        for address, nbytes in words:
            if address < end and address + nbytes > base:
                lo, hi = max(address, base) - base, min(address + nbytes, end) - base
                hit[lo // size : -(-hi // size)] = True
        return hit

    def _report(self, task: TaskInfo, name: str, clash: torch.Tensor, writers: torch.Tensor) -> str:
        first = int(clash.nonzero()[0])
        other = self.graph.tasks[int(writers[first])]
        layer = self.graph.layers[task.layer]
        count = int(clash.sum())
        return (
            f"{name}[{first}] ({count} element(s) in all) changed with plain stores by task {task.id} ({task.label}) "
            f"and by task {other.id} ({other.label}) of the same layer in this iteration: the tasks of layer "
            f"{layer.name} have no dependency on one another, so on the GPU they can run at once and overwrite "
            f"each other's scratch in its workspace. Give each task its own part of the workspace (indexed by its "
            f"grid index), or change a word the tasks share only with atomics"
        )
