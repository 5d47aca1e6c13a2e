"""Which earlier tasks a new task must not overtake: read-after-write, write-after-read and
write-after-write on overlapping regions of one tensor. Program order is a topological order of
the result, which the scheduler relies on."""

from __future__ import annotations

from .tensors import Region, TensorSlice

# One earlier access: (task id, layer id, region, chosen at run time and disjoint within its layer).
_Access = tuple[int, int, Region, bool]


class HazardTracker:
    """Per tensor, every earlier read and write."""

    def __init__(self) -> None:
        self._reads: dict[str, list[_Access]] = {}
        self._writes: dict[str, list[_Access]] = {}

    def add(self, task_id: int, layer: int, reads: list[TensorSlice], writes: list[TensorSlice]) -> dict[int, str]:
        """Record a task's slices; return its producers: task id -> "raw" | "war" | "waw"."""
        deps: dict[int, str] = {}

        def conflicts(s: TensorSlice, earlier: list[_Access], hazard: str) -> None:
            for tid, lid, reg, disjoint in earlier:
                if lid == layer and disjoint and s.runtime_disjoint:
                    continue  # the layer's tasks pick disjoint parts at run time
                if reg.overlaps(s.region):
                    deps.setdefault(tid, hazard)

        for s in reads:
            conflicts(s, self._writes.get(s.tensor.name, []), "raw")
        for s in writes:
            conflicts(s, self._writes.get(s.tensor.name, []), "waw")
            conflicts(s, self._reads.get(s.tensor.name, []), "war")
        for s in reads:
            self._reads.setdefault(s.tensor.name, []).append((task_id, layer, s.region, s.runtime_disjoint))
        for s in writes:
            self._writes.setdefault(s.tensor.name, []).append((task_id, layer, s.region, s.runtime_disjoint))
        return deps
