"""Which earlier tasks a new task must not overtake: read-after-write, write-after-read and
write-after-write on overlapping regions of one tensor. Program order is a topological order of
the result, which the scheduler relies on."""

from __future__ import annotations

from .tensors import Region, TensorSlice


class HazardTracker:
    """Per tensor, the (task id, region) of every earlier read and write."""

    def __init__(self) -> None:
        self._reads: dict[str, list[tuple[int, Region]]] = {}
        self._writes: dict[str, list[tuple[int, Region]]] = {}

    def add(self, task_id: int, reads: list[TensorSlice], writes: list[TensorSlice]) -> dict[int, str]:
        """Record a task's slices; return its producers: task id -> "raw" | "war" | "waw"."""
        deps: dict[int, str] = {}
        for s in reads:
            for tid, reg in self._writes.get(s.tensor.name, ()):
                if reg.overlaps(s.region):
                    deps.setdefault(tid, "raw")
        for s in writes:
            for tid, reg in self._writes.get(s.tensor.name, ()):
                if reg.overlaps(s.region):
                    deps.setdefault(tid, "waw")
            for tid, reg in self._reads.get(s.tensor.name, ()):
                if reg.overlaps(s.region):
                    deps.setdefault(tid, "war")
        for s in reads:
            self._reads.setdefault(s.tensor.name, []).append((task_id, s.region))
        for s in writes:
            self._writes.setdefault(s.tensor.name, []).append((task_id, s.region))
        return deps
