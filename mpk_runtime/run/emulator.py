"""CPU execution of a task graph: the backend for machines without a GPU of the target arch.

It runs the compiled graph the way the device does: each worker walks its queue in order; a task
starts only when its event reached the iteration's target; finishing it advances the events it
triggers; END_OF_TASK_GRAPH runs ``prepare_next_batch``. Among the workers that can move, it picks
one at random (seeded), so a dependency missing from the graph shows up as a wrong result here too,
and a deadlock raises the same WatchdogError record the device watchdog produces.

What computes a task is ``emulated_tasks.py``'s business: the real CUDA bodies built for the host
(``HostTasks``; prepare_next_batch is then the device's code, checked against its Python model), or
each task spec's slice reference (``ReferenceTasks``; the Python model plans).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import GraphError, WatchdogError
from ..graph.compiled import CompiledGraph, TaskInfo
from . import batching, diagnostics
from .emulated_order import TaskOrder
from .emulated_tasks import HostTasks, ReferenceTasks, Tasks
from .host_runner import HostModule

# Called after every iteration with its index and the requests of its batch slots, in slot order.
Observer = Callable[[int, list[int]], None]


@dataclass
class EmulatedRun:
    iterations: int
    order: list[int]  # task ids in the order they ran, all iterations


class EmulatedKernel:
    """A compiled graph on the CPU emulator, with GpuKernel's interface: a launch runs to completion
    (each launch interleaves the workers with a new seed: run/emulated_order.py), so there is
    nothing to harvest. With a host ``module`` the tasks run their CUDA bodies (``check``: a
    race-checking module, slices checked too), without one their slice references."""

    handle = None

    def __init__(
        self,
        graph: CompiledGraph,
        tensors: dict[str, torch.Tensor],
        meta: dict[str, torch.Tensor],
        cfg: batching.BatchConfig,
        module: HostModule | None = None,
        check: bool = False,
        time_limit_s: int = 0,
    ):
        _check_tensors(graph, tensors)
        self.graph, self.tensors, self.meta, self.cfg = graph, tensors, meta, cfg
        self.tasks: Tasks = (
            HostTasks(module, graph, tensors, meta, cfg, check, time_limit_s)
            if module is not None
            else ReferenceTasks(graph, tensors, meta, cfg)
        )
        self.launches = 0
        self.observer: Observer | None = None
        # The workers' interleaving is drawn from a seed of the graph's tensors and the launch: a run
        # repeats exactly, and graphs of other shapes (a scene's cases) see other orders, so that a
        # write another task's later write hides shows in some of them.
        shapes = ";".join(f"{t.name}:{tuple(t.shape)}" for t in graph.tensors)
        self.seed_base = zlib.crc32(shapes.encode())

    def launch(self, stream: object = None) -> None:
        self.launches += 1
        run(self.graph, self.tasks, seed=self.seed_base + self.launches, after_iteration=self.observer)

    def harvest(self, timeout_ms: int) -> None:
        pass

    def free(self) -> None:
        if isinstance(self.tasks, HostTasks):
            self.tasks.free()


def _check_tensors(graph: CompiledGraph, tensors: dict[str, torch.Tensor]) -> None:
    for t in graph.tensors:
        if t.name not in tensors:
            raise GraphError(f"emulator: the graph uses tensor {t.name!r}, which was not given")
        if tensors[t.name].device.type != "cpu":
            raise GraphError(
                f"emulator: tensor {t.name!r} is on {tensors[t.name].device}; the emulator computes on CPU tensors "
                f"(create them without device=, or on mpk_device)"
            )


def run(graph: CompiledGraph, tasks: Tasks, seed: int = 0, after_iteration: Observer | None = None) -> EmulatedRun:
    """Run the graph for as many iterations as prepare_next_batch allows (one in test mode), each
    task by ``tasks``, in place; ``after_iteration`` sees every tensor after each iteration, before
    the next prepare_next_batch."""
    rng = random.Random(seed)
    order: list[int] = []
    iteration = 0
    tasks.begin()
    try:
        while tasks.prepare_next_batch(iteration):
            _run_iteration(graph, tasks, iteration, seed, rng, order)
            if after_iteration is not None:
                after_iteration(iteration, tasks.observe())
            iteration += 1
    finally:
        tasks.end()
    return EmulatedRun(iteration, order)


def _run_iteration(graph: CompiledGraph, tasks: Tasks, iteration: int, seed: int, rng: random.Random, order: list[int]) -> None:
    queues = graph.schedule.queues
    events = graph.schedule.events
    counters = [0] * len(events)
    pos = [0] * len(queues)
    live = [w for w, q in enumerate(queues) if q]
    choose = TaskOrder(graph, rng)  # each task as early as its declared dependencies allow
    while live:
        ready = [w for w in live if _can_start(graph.tasks[queues[w][pos[w]]], counters, graph)]
        if not ready:
            raise _deadlock(graph, pos, iteration)
        w = choose.pick(ready, {w: queues[w][pos[w]] for w in ready})
        t = graph.tasks[queues[w][pos[w]]]
        tasks.run_task(t, iteration, seed)
        choose.ran(t.id)
        for e in t.triggers:
            counters[e] += 1
        order.append(t.id)
        pos[w] += 1
        if pos[w] == len(queues[w]):
            live.remove(w)


def _can_start(task: TaskInfo, counters: list[int], graph: CompiledGraph) -> bool:
    e = task.wait_event
    return e is None or counters[e] >= graph.schedule.events[e].trigger_count


def _deadlock(graph: CompiledGraph, pos: list[int], iteration: int) -> WatchdogError:
    # The state in the device's shape, so that the record is the watchdog's own.
    queues = graph.schedule.queues
    status = torch.full((len(queues), 2), -1, dtype=torch.int64)
    progress = torch.tensor([iteration * len(q) + pos[w] for w, q in enumerate(queues)], dtype=torch.int64)
    for w, q in enumerate(queues):
        if pos[w] < len(q):
            status[w] = torch.tensor([q[pos[w]], 1])
    record = diagnostics.watchdog_record(diagnostics.ScheduleView.of(graph), iteration, 1, status, progress)
    return WatchdogError(diagnostics.format_watchdog(record, iteration), record)
