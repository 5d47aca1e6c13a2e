"""Plain writes that two tasks of one layer make to the same scratch, found by the emulator after
each task: the same words of the layer's workspace, or of a ``__device__`` variable of the module.

A layer's tasks have no dependency on one another, so on the GPU any two of them can run at once. A
word that several of them change is shared by design only when every change is atomic (a split
count): a plain store into a word another task of the layer also stores into is a race, e.g. a
scratch row every task uses where each needs its own (index it by the task's grid index). The
emulator runs one task at a time, so the race itself never shows in its results: each task finds
the scratch as it left it. Here each task's changes to the scratch are noted per iteration, with
the words it updated atomically (the emulator's note_atomic, csrc/emulation/shim_api.h); a word
that a second task changes with a plain store is reported with both tasks, whichever ran first. A
store of the value already there changes nothing and goes unseen.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..graph.compiled import CompiledGraph, TaskInfo
from .task_writes import changed_elements


class Scratch(NamedTuple):
    view: torch.Tensor  # flat: the workspace's elements, or a variable's bytes
    address: int
    label: str  # "rotate_rows_0.stage", or "__device__ variable user::g_stage"
    unit: str  # "element", or "byte"


class LayerScratch:
    """The workspaces of ``graph``'s layers (``views`` at ``pointers``) and the module's ``__device__``
    variables (``variables``: name, address, bytes): ``before`` a task, ``after`` it, ``new_iteration``
    between iterations."""

    def __init__(
        self,
        graph: CompiledGraph,
        views: dict[str, torch.Tensor],
        pointers: dict[str, int],
        variables: Sequence[tuple[str, int, int]] = (),
    ):
        self.graph = graph
        workspaces = {t.name for t in graph.tensors if t.kind == "workspace"}
        self.scratch = {n: Scratch(views[n].reshape(-1), pointers[n], n, "element") for n in workspaces}
        for name, address, size in variables:
            memory = (C.c_uint8 * size).from_address(address)
            self.scratch[name] = Scratch(
                torch.frombuffer(memory, dtype=torch.uint8), address, f"__device__ variable {name}", "byte"
            )
        names = [name for name, _, _ in variables]
        self.scratch_of = {t.id: sorted({s.tensor for s in t.inputs if s.tensor in workspaces}) + names for t in graph.tasks}
        self.writers: dict[tuple[int, str], torch.Tensor] = {}  # (layer, scratch) -> the task that changed each element, or -1
        self.atomic: dict[tuple[int, str], torch.Tensor] = {}  # (layer, scratch) -> elements a task changed atomically

    def new_iteration(self) -> None:
        self.writers.clear()
        self.atomic.clear()

    def before(self, task: TaskInfo) -> list[tuple[str, torch.Tensor]]:
        return [(name, self.scratch[name].view.clone()) for name in self.scratch_of[task.id]]

    def after(
        self, task: TaskInfo, before: list[tuple[str, torch.Tensor]], atomic_words: Sequence[tuple[int, int]]
    ) -> str | None:
        """Scratch that ``task`` changed with a plain store and another task of its layer changed
        earlier this iteration (None: none)."""
        for name, old in before:
            new = self.scratch[name].view
            changed = changed_elements(old, new)
            if not changed.any():
                continue
            key = (task.layer, name)
            atomic = self.atomic.setdefault(key, torch.zeros(new.numel(), dtype=torch.bool))
            atomic |= self._elements(self.scratch[name], atomic_words)
            writers = self.writers.setdefault(key, torch.full((new.numel(),), -1, dtype=torch.int32))
            clash = changed & (writers >= 0) & (writers != task.id) & ~atomic
            if clash.any():
                return self._report(task, self.scratch[name], clash, writers)
            writers[changed] = task.id
        return None

    @staticmethod
    def _elements(s: Scratch, words: Sequence[tuple[int, int]]) -> torch.Tensor:
        """The elements of ``s`` that the (address, bytes) words overlap."""
        size = s.view.element_size()
        end = s.address + s.view.numel() * size
        hit = torch.zeros(s.view.numel(), dtype=torch.bool)
        for address, nbytes in words:
            if address < end and address + nbytes > s.address:
                lo, hi = max(address, s.address) - s.address, min(address + nbytes, end) - s.address
                hit[lo // size : -(-hi // size)] = True
        return hit

    def _report(self, task: TaskInfo, s: Scratch, clash: torch.Tensor, writers: torch.Tensor) -> str:
        first = int(clash.nonzero()[0])
        other = self.graph.tasks[int(writers[first])]
        layer = self.graph.layers[task.layer]
        where = f"{s.label}[{first}]" if s.unit == "element" else f"{s.label}, byte {first}"
        return (
            f"{where} ({int(clash.sum())} {s.unit}(s) in all) changed with plain stores by task {task.id} ({task.label}) "
            f"and by task {other.id} ({other.label}) of the same layer in this iteration: the tasks of layer "
            f"{layer.name} have no dependency on one another, so on the GPU they can run at once and overwrite "
            f"each other's scratch. Give each task its own part (indexed by its grid index; a layer's own scratch "
            f"belongs in its workspace, TaskSpec.workspace), or change a word the tasks share only with atomics"
        )
