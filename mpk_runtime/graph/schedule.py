"""The scheduling policy: which worker runs each task, in which order, and which events connect them.

The graph is static, so placement happens once, at compile time. Every worker gets a queue (its
tasks in program order, which is topological; so no worker can wait on a task queued behind it and
the schedule cannot deadlock). A task whose producers all ran earlier on its own worker needs no
event at all. Any other task waits on exactly one event: the one counting its producer set, shared
by every task with the same set. Producers increment the events that contain them.

Policies:
- ``locality`` (default): list scheduling on estimated costs; a task goes where it can start first,
  counting a cross-worker hop as extra latency, so elementwise chains stay on one worker and wide
  layers spread over all of them.
- ``round_robin``: task i goes to worker i mod num_workers, so dependent tasks always cross SMs
  (used to measure and stress the dependency hop).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..errors import ConfigError
from .task_graph import TaskGraph

POLICIES = ("locality", "round_robin")
HOP_NS = 700.0  # estimated cost of a cross-SM dependency, from the handoff anchor


@dataclass
class Event:
    id: int
    producers: list[int]
    consumers: list[int] = field(default_factory=list)

    @property
    def trigger_count(self) -> int:
        return len(self.producers)


@dataclass
class Schedule:
    policy: str
    num_workers: int
    worker_of: list[int]
    queues: list[list[int]]
    wait_event: list[int | None]  # per task: the event it waits on, None if it needs none
    triggers: list[list[int]]  # per task: the events it increments
    events: list[Event]


def build_schedule(graph: TaskGraph, num_workers: int, policy: str = "locality") -> Schedule:
    if policy not in POLICIES:
        raise ConfigError(f"placement={policy!r} is not a scheduling policy; use one of {', '.join(POLICIES)}")
    if policy == "round_robin":
        worker_of = [t.id % num_workers for t in graph.tasks]
    else:
        worker_of = _place_by_locality(graph, num_workers)
    queues: list[list[int]] = [[] for _ in range(num_workers)]
    for t in graph.tasks:
        queues[worker_of[t.id]].append(t.id)

    events: list[Event] = []
    by_producers: dict[tuple[int, ...], Event] = {}
    wait_event: list[int | None] = [None] * len(graph.tasks)
    triggers: list[list[int]] = [[] for _ in graph.tasks]
    for t in graph.tasks:
        w = worker_of[t.id]
        if all(worker_of[p] == w for p in t.deps):
            continue  # no producers, or all of them ran earlier in this worker's own queue
        key = tuple(sorted(t.deps))
        ev = by_producers.get(key)
        if ev is None:
            ev = Event(len(events), list(key))
            events.append(ev)
            by_producers[key] = ev
            for p in key:
                triggers[p].append(ev.id)
        ev.consumers.append(t.id)
        wait_event[t.id] = ev.id
    return Schedule(policy, num_workers, worker_of, queues, wait_event, triggers, events)


def _place_by_locality(graph: TaskGraph, num_workers: int) -> list[int]:
    avail = [0.0] * num_workers
    heap = [(0.0, w) for w in range(num_workers)]  # lazily updated (avail, worker)
    worker_of = [0] * len(graph.tasks)
    finish = [0.0] * len(graph.tasks)
    for t in graph.tasks:
        while heap[0][0] != avail[heap[0][1]]:
            heapq.heappop(heap)
        idlest = heap[0][1]
        if not t.deps:
            best_w, best_start = idlest, avail[idlest]
            worker_of[t.id] = best_w
            finish[t.id] = best_start + t.layer.cost_ns
            avail[best_w] = finish[t.id]
            heapq.heapreplace(heap, (avail[best_w], best_w))
            continue
        # A producer's data is ready on its own worker at its finish, elsewhere a hop later: per
        # candidate worker, the latest finish there and the latest elsewhere (from the two latest
        # finishes on distinct workers), in one pass over the producers.
        latest: dict[int, float] = {}
        for p in t.deps:
            w, f = worker_of[p], finish[p]
            if f > latest.get(w, -1.0):
                latest[w] = f
        f1, w1 = max((f, w) for w, f in latest.items())
        f2 = max((f for w, f in latest.items() if w != w1), default=None)
        hop1, hop2 = f1 + HOP_NS, (0.0 if f2 is None else f2 + HOP_NS)
        best_w, best_start = idlest, float("inf")
        for w in sorted({idlest, *latest}):
            ready = max(latest.get(w, 0.0), hop2 if w == w1 else hop1)
            start = max(avail[w], ready)
            # On a tie prefer a producer's worker (locality), then the idlest one.
            if start < best_start or (start == best_start and w != idlest and best_w == idlest):
                best_w, best_start = w, start
        worker_of[t.id] = best_w
        finish[t.id] = best_start + t.layer.cost_ns
        avail[best_w] = finish[t.id]
        heapq.heappush(heap, (avail[best_w], best_w))
    return worker_of
