"""Which worker the emulator moves next (run/emulator.py): an order that runs each task as early as
its declared dependencies allow, so that a dependency a spec misses (a halo row its slices do not
cover, a buffer a later layer overwrites) shows as a wrong result.

Two rules, with seeded choices among equals. First, the deepest layer's ready task runs first: once a
consumer's producers are done, no earlier layer's task runs before it. Second, when no consumer is
ready, the producers of one target run before any other task: the target is a pending task with the
fewest producers left (or, while one of its producers waits for others, that producer), kept until
it runs. So a target reads before every task it does not wait for
has run, whatever the number of workers, where a random order often runs them all first."""

from __future__ import annotations

import random

from ..graph.compiled import CompiledGraph


class TaskOrder:
    def __init__(self, graph: CompiledGraph, rng: random.Random):
        self.graph, self.rng = graph, rng
        n = len(graph.tasks)
        self.producers = [sorted({d for d, _ in t.deps}) for t in graph.tasks]
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        for t in graph.tasks:
            for d in self.producers[t.id]:
                self.consumers[d].append(t.id)
        self.left = [len(p) for p in self.producers]  # producers not run yet
        self.by_left: dict[int, set[int]] = {}  # producers left -> pending tasks with that many
        for i, k in enumerate(self.left):
            if k:
                self.by_left.setdefault(k, set()).add(i)
        self.done = [False] * n
        self.target: int | None = None

    def pick(self, ready: list[int], head: dict[int, int]) -> int:
        """The worker to move, of the ``ready`` ones (``head``: worker -> the task at its queue's head)."""
        tasks = self.graph.tasks
        deepest = max(tasks[head[w]].layer for w in ready)
        if self.target is None or self.done[self.target]:
            self.target = self._new_target()
        if self.target is not None:
            target = tasks[self.target]
            if deepest < target.layer:  # nothing as deep as the target is ready: run toward it
                wanted = {tasks[p].worker for p in self.producers[self.target] if not self.done[p]} | {target.worker}
                closer = [w for w in ready if w in wanted]
                if closer:
                    return self.rng.choice(closer)
        return self.rng.choice([w for w in ready if tasks[head[w]].layer == deepest])

    def ran(self, task: int) -> None:
        self.done[task] = True
        for c in self.consumers[task]:
            k = self.left[c]
            self.by_left[k].discard(c)
            self.left[c] = k - 1
            if k > 1:
                self.by_left.setdefault(k - 1, set()).add(c)

    def _new_target(self) -> int | None:
        """A pending task with the fewest producers left; then, while one of its producers waits for
        producers of its own, that producer (the one with the fewest left): a task whose producers left
        can all run now."""
        ks = sorted(k for k, s in self.by_left.items() if s)
        if not ks:
            return None
        t = self.rng.choice(sorted(self.by_left[ks[0]]))
        while waiting := [p for p in self.producers[t] if not self.done[p] and self.left[p]]:
            fewest = min(self.left[p] for p in waiting)
            t = self.rng.choice([p for p in waiting if self.left[p] == fewest])
        return t
