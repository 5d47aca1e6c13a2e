"""Which earlier tasks a new task must not overtake: read-after-write, write-after-read and
write-after-write on overlapping regions of one tensor. Program order is a topological order of
the result, which the scheduler relies on.

Only what ordering needs is kept, per tensor: the last writers of each region and the readers
since. Writes supersede the earlier accesses they cover: a later task that touches such a region
conflicts with a covering write (a read with it, a write with it), and that write already waits
for the accesses it covered, so the later task is ordered after them through it. An access is
dropped when one write covers it whole, and, at the end of a layer that writes a tensor (its
tasks' slices tile the tensor), every access to that tensor from before the layer. The edges are
thus a subset of the hazards whose transitive closure orders every pair of conflicting accesses,
and a graph of n layers over two tensors has O(n) edges, not O(n^2).

Edges that the order of whole layers implies are pruned too (LayerOrder): a task that waits for
a task which comes after every task of layer L needs no edge into layers up to L (for example,
the write-after-read edges from a layer back to the readers of the layer before last, which its
read-after-write chain through the layers between already orders).

A partition may leave a dimension for its tasks to pick at run time (Partition.selected): each
task is then recorded as touching the whole dimension, and the spec promises that the tasks of
one layer touch disjoint parts of it. Such accesses of one layer are not ordered against each
other, and none of them supersedes an access (it writes only a part of its block): the accesses
before the layer are superseded at its end, when the layer as a whole has written the tensor.

A partition cuts every dimension of a tensor into equal blocks (task_graph._cuts), so an access
is a block: its extent per dimension and its coordinates in blocks. Accesses are kept per tensor,
grouped by extent, in dicts keyed by coordinates. The blocks of a group that meet a region are a
range per dimension, found by arithmetic (one lookup when the extents agree, the usual case), or
by scanning the group when that is shorter. Work per task is then proportional to its
dependencies plus the accesses it supersedes, each of which is dropped once.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

Cell = tuple[int, ...]


class Block(NamedTuple):
    """An access to a tensor: elements [cell * size, (cell + 1) * size) in every dimension."""

    tensor: str
    size: tuple[int, ...]
    cell: Cell
    disjoint: bool = False  # the layer's tasks pick disjoint parts of the block at run time

    def inside(self, other: Block) -> bool:
        return all(
            c * s >= oc * os and (c + 1) * s <= (oc + 1) * os
            for c, s, oc, os in zip(self.cell, self.size, other.cell, other.size)
        )


class _Grouped:
    """Accesses of one kind (reads or writes) to one tensor: extent -> coordinates -> task ids."""

    def __init__(self) -> None:
        self.groups: dict[tuple[int, ...], dict[Cell, list[int]]] = {}

    def add(self, b: Block, task_id: int) -> None:
        cells = self.groups.get(b.size)
        if cells is None:
            self.groups[b.size] = {b.cell: [task_id]}
        elif b.cell in cells:
            cells[b.cell].append(task_id)
        else:
            cells[b.cell] = [task_id]

    def overlapping(self, b: Block) -> list[int]:
        found: list[int] = []
        for size, cells in self.groups.items():
            if size == b.size:
                found += cells.get(b.cell, ())
            else:
                for cell in _cells_within(cells, size, b, whole=False):
                    found += cells[cell]
        return found

    def drop_covered(self, b: Block) -> None:
        """Forget every access that lies wholly inside ``b``."""
        for size, cells in list(self.groups.items()):
            if size == b.size:
                cells.pop(b.cell, None)
            else:
                for cell in _cells_within(cells, size, b, whole=True):
                    del cells[cell]
            if not cells:
                del self.groups[size]

    def drop_before(self, first_task: int) -> None:
        """Forget every access by a task before ``first_task``."""
        for size, cells in list(self.groups.items()):
            for cell, ids in list(cells.items()):
                kept = [t for t in ids if t >= first_task]
                if kept:
                    cells[cell] = kept
                else:
                    del cells[cell]
            if not cells:
                del self.groups[size]


def _cells_within(cells: dict[Cell, list[int]], size: tuple[int, ...], b: Block, whole: bool) -> list[Cell]:
    """The blocks of extent ``size`` in ``cells`` that meet ``b`` (whole=False) or lie wholly
    inside it (whole=True)."""
    ranges = []
    for c, bs, s in zip(b.cell, b.size, size):
        lo, hi = c * bs, (c + 1) * bs
        ranges.append(range(-(-lo // s), hi // s) if whole else range(lo // s, -(-hi // s)))
    count = 1
    for r in ranges:
        count *= len(r)
    if count <= len(cells):
        return [cell for cell in itertools.product(*ranges) if cell in cells]
    return [cell for cell in cells if all(c in r for c, r in zip(cell, ranges))]


class HazardTracker:
    """Per tensor, the last writers of each region and the readers since (see the module's doc)."""

    def __init__(self) -> None:
        self._reads: dict[str, _Grouped] = {}
        self._writes: dict[str, _Grouped] = {}
        # Per tensor, the tasks of the current layer whose accesses to it are runtime-disjoint.
        self._disjoint: dict[str, set[int]] = {}

    def begin_layer(self) -> None:
        self._disjoint = {}

    def add(self, task_id: int, reads: list[Block], writes: list[Block]) -> dict[int, str]:
        """Record a task's accesses; return its producers: task id -> "raw" | "war" | "waw"."""
        deps: dict[int, str] = {}
        # Where several kinds apply to one producer, the label is the first of raw, waw, war.
        for blocks, table, hazard in ((reads, self._writes, "raw"), (writes, self._writes, "waw"), (writes, self._reads, "war")):
            for b in blocks:
                known = table.get(b.tensor)
                if known is not None:
                    siblings = self._disjoint.get(b.tensor, ()) if b.disjoint else ()
                    for tid in known.overlapping(b):
                        if tid not in deps and tid not in siblings:
                            deps[tid] = hazard
        for b in writes:
            if b.disjoint:  # it writes only a part of its block, chosen at run time: it supersedes nothing
                continue
            for table in (self._writes, self._reads):
                known = table.get(b.tensor)
                if known is not None:
                    known.drop_covered(b)
        for b in (*reads, *writes):
            if b.disjoint:
                self._disjoint.setdefault(b.tensor, set()).add(task_id)
        for b in writes:
            known = self._writes.get(b.tensor)
            if known is None:
                known = self._writes[b.tensor] = _Grouped()
            known.add(b, task_id)
        for b in reads:
            if not any(w.tensor == b.tensor and b.inside(w) for w in writes):
                known = self._reads.get(b.tensor)
                if known is None:
                    known = self._reads[b.tensor] = _Grouped()
                known.add(b, task_id)
        return deps

    def rewritten(self, tensor: str, first_task: int) -> None:
        """The tasks from ``first_task`` on (one layer) have written every element of ``tensor``:
        the accesses to it from before them are superseded."""
        for table in (self._writes, self._reads):
            known = table.get(tensor)
            if known is not None:
                known.drop_before(first_task)


class LayerOrder:
    """Which whole layers each task is known to come after, to prune the edges they imply.

    ``done[t]`` is the largest L such that every task of layers 0..L is an ancestor of task t (-1:
    none known); ``closure[m]`` the same for the union of the ancestors of layer m's tasks. A task
    gets at least the largest ``done`` of its producers, plus every layer all of whose tasks are
    its producers (with that layer's ``closure``), as long as the covered layers run on without a
    gap. A producer in a layer up to its largest producer's ``done`` is an ancestor of that
    producer, so its edge is dropped: the producer that gave the ``done`` itself lies in a later
    layer (no task is its own ancestor), so the ordering survives."""

    def __init__(self) -> None:
        self.layer_of: list[int] = []
        self.done: list[int] = []
        self.first: list[int] = []
        self.size: list[int] = []
        self.closure: list[int] = []
        self._union: set[int] = set()
        self._prefix = -1

    def begin_layer(self, first_task: int, num_tasks: int) -> None:
        self.first.append(first_task)
        self.size.append(num_tasks)
        self._union, self._prefix = set(), -1

    def prune(self, deps: dict[int, str]) -> dict[int, str]:
        """The producers of the next task of the current layer, less those implied; records the task."""
        if not deps:
            self.layer_of.append(len(self.first) - 1)
            self.done.append(-1)
            return deps
        base = max([self.done[d] for d in deps])
        if base >= 0:
            deps = {d: h for d, h in deps.items() if self.layer_of[d] > base}
        done = self._extend(base, deps)
        self.layer_of.append(len(self.first) - 1)
        self.done.append(done)
        self._union.update(deps)
        self._prefix = max(self._prefix, done)
        return deps

    def end_layer(self) -> None:
        self.closure.append(self._extend(self._prefix, self._union))
        self._union = set()

    def _extend(self, base: int, producers: Iterable[int]) -> int:
        counts = Counter(self.layer_of[d] for d in producers)
        full = {layer for layer, n in counts.items() if n == self.size[layer]}
        base = max([base, *(self.closure[layer] for layer in full)])
        while base + 1 in full:
            base += 1
        return base
