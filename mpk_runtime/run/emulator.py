"""CPU execution of a task graph: the backend for machines without a GPU of the target arch.

It runs the compiled graph the way the device does: each worker walks its queue in order; a task
starts only when its event reached the iteration's target; finishing it advances the events it
triggers; END_OF_TASK_GRAPH runs ``prepare_next_batch`` (``batching.py``, the model of the device
code). Among the workers that can move, it picks one at random (seeded), so a dependency missing
from the graph shows up as a wrong result here too, and a deadlock raises the same WatchdogError
record the device watchdog produces. Each task computes its output slices from its input slices
with its task spec's slice reference (``TaskSpec.emulate``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import GraphError, KernelError, WatchdogError
from ..graph.compiled import CompiledGraph, SliceRef, TaskInfo
from ..tasks import registry
from ..tasks.spec import EmulationContext, TaskFailure, TaskSpec
from . import batching, diagnostics

# Called after every iteration with its index and the requests of its batch slots, in slot order.
Observer = Callable[[int, list[int]], None]


@dataclass
class EmulatedRun:
    iterations: int
    order: list[int]  # task ids in the order they ran, all iterations


class EmulatedKernel:
    """A compiled graph on the CPU emulator, with GpuKernel's interface: a launch runs to completion
    (each launch interleaves the workers with a new seed), so there is nothing to harvest or free."""

    handle = None

    def __init__(
        self, graph: CompiledGraph, tensors: dict[str, torch.Tensor], meta: dict[str, torch.Tensor], cfg: batching.BatchConfig
    ):
        self.graph, self.tensors, self.meta, self.cfg = graph, tensors, meta, cfg
        self.launches = 0
        self.observer: Observer | None = None

    def launch(self, stream: object = None) -> None:
        self.launches += 1
        run(self.graph, self.tensors, self.meta, self.cfg, seed=self.launches, after_iteration=self.observer)

    def harvest(self, timeout_ms: int) -> None:
        pass

    def free(self) -> None:
        pass


def run(
    graph: CompiledGraph,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, torch.Tensor],
    cfg: batching.BatchConfig,
    seed: int = 0,
    after_iteration: Observer | None = None,
) -> EmulatedRun:
    """Run the graph for as many iterations as prepare_next_batch allows (one in test mode),
    on the CPU tensors ``tensors`` (by name) and ``meta``, in place; ``after_iteration`` sees every
    tensor after each iteration, before the next prepare_next_batch."""
    for t in graph.tensors:
        if t.name not in tensors:
            raise GraphError(f"emulator: the graph uses tensor {t.name!r}, which was not given")
        if tensors[t.name].device.type != "cpu":
            raise GraphError(
                f"emulator: tensor {t.name!r} is on {tensors[t.name].device}; the emulator computes on CPU tensors "
                f"(create them without device=, or on mpk_device)"
            )
    specs = [registry.get(layer.task) for layer in graph.layers]
    rng = random.Random(seed)
    planner = batching.BatchPlanner(cfg, meta)
    order: list[int] = []
    iteration = 0
    while planner.prepare_next_batch(iteration):
        active = (cfg.max_num_batched_tokens, int(meta["num_new_tokens"][0]))
        _run_iteration(_Iteration(graph, tensors, specs, meta, cfg, iteration, active), rng, order)
        if after_iteration is not None:
            after_iteration(iteration, list(planner.batch))
        iteration += 1
    return EmulatedRun(iteration, order)


def _view(tensors: dict[str, torch.Tensor], s: SliceRef, token_dim: int | None, active: tuple[int, int]) -> torch.Tensor:
    """The task's slice of a tensor; along a token dimension of max_num_batched_tokens rows, only
    the rows below the iteration's active-token count (Runtime::active_rows on the device)."""
    t = tensors[s.tensor]
    bounds = list(zip(s.lo, s.hi))
    max_tokens, num_active = active
    if token_dim is not None and t.shape[token_dim] == max_tokens:
        lo, hi = bounds[token_dim]
        bounds[token_dim] = (lo, max(lo, min(hi, num_active)))
    return t[tuple(slice(lo, hi) for lo, hi in bounds)]


@dataclass
class _Iteration:
    """What every task of one emulated iteration reads."""

    graph: CompiledGraph
    tensors: dict[str, torch.Tensor]
    specs: list[TaskSpec]
    meta: dict[str, torch.Tensor]
    cfg: batching.BatchConfig
    index: int
    active: tuple[int, int]  # (max_num_batched_tokens, active tokens)


def _run_task(it: _Iteration, t: TaskInfo) -> None:
    layer, spec = it.graph.layers[t.layer], it.specs[t.layer]
    ins, outs = layer.input_names, layer.output_names
    views = {n: _view(it.tensors, s, spec.token_dims.get(n), it.active) for n, s in zip(ins + outs, t.inputs + t.outputs)}
    if any(views[n].numel() == 0 for n in spec.token_dims if n in views):
        return  # no live rows
    ctx = EmulationContext(t.grid_idx, layer.grid, it.meta, it.cfg, it.index)
    try:
        spec.emulate({n: views[n] for n in ins}, {n: views[n] for n in outs}, layer.values, ctx)
    except TaskFailure as f:
        raise KernelError(
            f"emulated iteration {it.index}: {diagnostics.task_error_message(it.graph, t.id, f.code, f.value)}"
        ) from None


def _run_iteration(it: _Iteration, rng: random.Random, order: list[int]) -> None:
    graph = it.graph
    queues = graph.schedule.queues
    events = graph.schedule.events
    counters = [0] * len(events)
    pos = [0] * len(queues)
    live = [w for w, q in enumerate(queues) if q]
    while live:
        ready = [w for w in live if _can_start(graph.tasks[queues[w][pos[w]]], counters, graph)]
        if not ready:
            raise _deadlock(graph, pos, it.index)
        w = rng.choice(ready)
        t = graph.tasks[queues[w][pos[w]]]
        _run_task(it, t)
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
