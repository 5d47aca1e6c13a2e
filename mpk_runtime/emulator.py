"""CPU execution of a task graph: the backend for machines without a GPU of the target arch.

It runs the task graph JSON (``artifacts.graph_json``) the way the device does: each worker walks its
queue in order; a task starts only when its event reached the iteration's target; finishing it
advances the events it triggers; END_OF_TASK_GRAPH runs ``prepare_next_batch`` (``batching.py``, the
model of the device code). Among the workers that can move, it picks one at random (seeded), so a
dependency missing from the graph shows up as a wrong result here too, and a deadlock raises the
same WatchdogError record the device watchdog produces. Each task computes its output slices from
its input slices with its task spec's slice reference (``TaskSpec.emulate``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from . import batching, diagnostics
from .errors import GraphError, KernelError, WatchdogError
from .tasks import registry


@dataclass
class EmulatedRun:
    iterations: int
    order: list[int]  # task ids in the order they ran, all iterations


def run(graph: dict, tensors: dict[str, torch.Tensor], meta: dict[str, torch.Tensor],
        cfg: batching.BatchConfig, seed: int = 0) -> EmulatedRun:
    """Run the graph for as many iterations as prepare_next_batch allows (one in test mode),
    on the CPU tensors ``tensors`` (by name) and ``meta``, in place."""
    for name in (t["name"] for t in graph["tensors"]):
        if name not in tensors:
            raise GraphError(f"emulator: the graph uses tensor {name!r}, which was not given")
        if tensors[name].device.type != "cpu":
            raise GraphError(
                f"emulator: tensor {name!r} is on {tensors[name].device}; the emulator computes on CPU tensors "
                f"(create them without device=, or on mpk_device)"
            )
    layers = graph["layers"]
    specs = {layer["id"]: registry.get(layer["task"]) for layer in layers}
    arg_names = {
        layer["id"]: ([a["name"] for a in layer["args"] if a["direction"] == "IN"],
                      [a["name"] for a in layer["args"] if a["direction"] == "OUT"])
        for layer in layers
    }
    rng = random.Random(seed)
    planner = batching.BatchPlanner(cfg, meta)
    order: list[int] = []
    iteration = 0
    while planner.prepare_next_batch(iteration):
        active = (cfg.max_num_batched_tokens, int(meta["num_new_tokens"][0]))
        _run_iteration(graph, tensors, specs, arg_names, rng, order, iteration, active)
        iteration += 1
    return EmulatedRun(iteration, order)


def _view(tensors: dict[str, torch.Tensor], s: dict, token_dim: int | None, active: tuple[int, int]) -> torch.Tensor:
    """The task's slice of a tensor; along a token dimension of max_num_batched_tokens rows, only
    the rows below the iteration's active-token count (Runtime::active_rows on the device)."""
    t = tensors[s["tensor"]]
    bounds = list(zip(s["lo"], s["hi"]))
    max_tokens, num_active = active
    if token_dim is not None and t.shape[token_dim] == max_tokens:
        lo, hi = bounds[token_dim]
        bounds[token_dim] = (lo, max(lo, min(hi, num_active)))
    return t[tuple(slice(lo, hi) for lo, hi in bounds)]


def _run_iteration(graph, tensors, specs, arg_names, rng, order, iteration: int, active: tuple[int, int]) -> None:
    tasks = graph["tasks"]
    layers = {layer["id"]: layer for layer in graph["layers"]}
    queues = graph["schedule"]["queues"]
    events = graph["schedule"]["events"]
    counters = [0] * len(events)
    pos = [0] * len(queues)
    live = [w for w, q in enumerate(queues) if q]
    while live:
        ready = [w for w in live if _can_start(tasks[queues[w][pos[w]]], counters, events)]
        if not ready:
            raise _deadlock(graph, queues, pos, iteration)
        w = rng.choice(ready)
        t = tasks[queues[w][pos[w]]]
        ins, outs = arg_names[t["layer"]]
        layer, spec = layers[t["layer"]], specs[t["layer"]]
        views = {n: _view(tensors, s, spec.token_dims.get(n), active) for n, s in zip(ins + outs, t["inputs"] + t["outputs"])}
        no_live_rows = any(views[n].numel() == 0 for n in spec.token_dims if n in views)
        if not no_live_rows:
            try:
                spec.emulate({n: views[n] for n in ins}, {n: views[n] for n in outs}, layer["values"])
            except registry.TaskFailure as f:
                raise KernelError(f"emulated iteration {iteration}: "
                                  f"{diagnostics.task_error_message(graph, t['id'], f.code, f.value)}") from None
        for e in t["triggers"]:
            counters[e] += 1
        order.append(t["id"])
        pos[w] += 1
        if pos[w] == len(queues[w]):
            live.remove(w)


def _can_start(task: dict, counters: list[int], events: list[dict]) -> bool:
    e = task["wait_event"]
    return e is None or counters[e] >= events[e]["trigger_count"]


def _deadlock(graph: dict, queues: list[list[int]], pos: list[int], iteration: int) -> WatchdogError:
    # The state in the device's shape, so that the record is the watchdog's own.
    status = torch.full((len(queues), 2), -1, dtype=torch.int64)
    progress = torch.tensor([iteration * len(q) + pos[w] for w, q in enumerate(queues)], dtype=torch.int64)
    for w, q in enumerate(queues):
        if pos[w] < len(q):
            status[w] = torch.tensor([q[pos[w]], 1])
    record = diagnostics.watchdog_record(diagnostics.ScheduleView.from_json(graph), iteration, 1, status, progress)
    return WatchdogError(diagnostics.format_watchdog(record, iteration), record)
