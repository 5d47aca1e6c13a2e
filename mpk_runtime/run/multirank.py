"""The CPU emulator for the ranks of a multi-rank graph, all in one process.

Every rank's compiled graph runs as emulator.py runs one: each worker walks its queue, a task starts
when its local event is complete, and each task computes its slices with its spec's slice reference.
Here the workers of *all* ranks are interleaved by one seeded scheduler, and a cross-rank task
(TaskSpec.cross_rank, e.g. the all-reduce) runs in two steps, as on the device: ``emulate_send``
delivers its part into its peers' tensors and raises its signal; ``emulate`` runs once every rank has
signalled the same task. When no worker of any rank can go on, the WatchdogError says, per rank,
which task waits for which event or which rank.

This module adds the ranks around the single-graph machinery and leaves emulator.py as it is.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ..errors import GraphError, KernelError, RankError, StateError, WatchdogError
from ..graph.compiled import CompiledGraph, TaskInfo
from ..tasks import registry
from ..tasks.spec import EmulationContext, TaskFailure
from . import batching, diagnostics
from .emulated_tasks import slice_view
from .emulator import EmulatedRun
from .rank_match import first_difference, matching_parts


class RankEmulatedKernel:
    """One rank's compiled graph on the CPU emulator (GpuKernel's interface). It runs only together
    with the other ranks' kernels, through ``run_ranks``."""

    handle = None

    def __init__(
        self,
        graph: CompiledGraph,
        tensors: dict[str, torch.Tensor],
        meta: dict[str, torch.Tensor],
        cfg: batching.BatchConfig,
        rank: int,
        world_size: int,
    ):
        self.graph, self.tensors, self.meta, self.cfg = graph, tensors, meta, cfg
        self.rank, self.world_size = rank, world_size
        self.launches = 0

    def launch(self, stream: object = None) -> None:
        raise StateError(
            f"rank {self.rank}: an emulated kernel of world_size={self.world_size} runs together with the other "
            f"ranks' kernels: mpk_runtime.run_emulated_ranks([pk_rank0, ..., pk_rank{self.world_size - 1}])"
        )

    def harvest(self, timeout_ms: int) -> None:
        pass

    def free(self) -> None:
        pass


def run_ranks(kernels: list[RankEmulatedKernel], seed: int = 0, hold: set[tuple[int, int]] | None = None) -> list[EmulatedRun]:
    """One launch of every rank's kernel (``kernels[r]`` is rank r's), on the CPU, in place. ``hold``:
    (rank, task id) pairs whose send never happens, as if that rank's task never signalled (tests)."""
    world = len(kernels)
    if not world:
        raise RankError(
            "run_emulated_ranks: no kernels given; pass every rank's compiled kernel in rank order, "
            "[pk_rank0, ..., pk_rank{world_size - 1}]"
        )
    for r, k in enumerate(kernels):
        if (k.rank, k.world_size) != (r, world):
            raise RankError(f"run_ranks: kernels[{r}] is rank {k.rank} of {k.world_size}; pass the {world} ranks in rank order")
    first = matching_parts(kernels[0].graph)
    for k in kernels[1:]:
        found = first_difference(first, matching_parts(k.graph))
        if found:
            where, mine, theirs = found
            raise RankError(
                f"rank {k.rank} built a different task graph or schedule than rank 0: {where} is {_cut(theirs)} on "
                f"rank {k.rank}, {_cut(mine)} on rank 0; every rank must declare the same tensors and layers (names, "
                f"shapes, grids) with the same num_workers",
                [k.rank],
            )
    for k in kernels:
        for t in k.graph.tensors:
            if t.name not in k.tensors or k.tensors[t.name].device.type != "cpu":
                raise GraphError(f"emulator: rank {k.rank}'s tensor {t.name!r} is missing or not a CPU tensor")
    ranks = [_Rank(k, [registry.get(layer.task) for layer in k.graph.layers]) for k in kernels]
    planners = [batching.BatchPlanner(k.cfg, k.meta) for k in kernels]
    rng = random.Random(seed)
    orders: list[list[int]] = [[] for _ in kernels]
    iteration = 0
    while True:
        go = [p.prepare_next_batch(iteration) for p in planners]
        if not any(go):
            break
        if not all(go):
            raise RankError(f"the ranks disagree on whether iteration {iteration} runs ({go}): give every rank the same requests")
        for rk in ranks:
            rk.active = (rk.k.cfg.max_num_batched_tokens, int(rk.k.meta["num_new_tokens"][0]))
        _Iteration(ranks, iteration, rng, orders, hold or set()).run()
        iteration += 1
    return [EmulatedRun(iteration, order) for order in orders]


def _cut(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class _Rank:
    k: RankEmulatedKernel
    specs: list
    active: tuple[int, int] = (0, 0)

    def views(self, t: TaskInfo) -> dict[str, torch.Tensor]:
        layer, spec = self.k.graph.layers[t.layer], self.specs[t.layer]
        names = layer.input_names + layer.output_names
        return {
            n: slice_view(self.k.tensors, s, spec.token_dims.get(n), self.active) for n, s in zip(names, t.inputs + t.outputs)
        }


class _Iteration:
    def __init__(self, ranks: list[_Rank], index: int, rng: random.Random, orders: list[list[int]], hold: set[tuple[int, int]]):
        self.ranks, self.index, self.rng, self.orders, self.hold = ranks, index, rng, orders, hold
        self.counters = [[0] * len(r.k.graph.schedule.events) for r in ranks]
        self.pos = {(r, w): 0 for r, rk in enumerate(ranks) for w in range(len(rk.k.graph.schedule.queues))}
        self.sent: set[tuple[int, int]] = set()  # (task, rank) that signalled in this iteration

    def head(self, r: int, w: int) -> TaskInfo | None:
        g = self.ranks[r].k.graph
        q = g.schedule.queues[w]
        return g.tasks[q[self.pos[(r, w)]]] if self.pos[(r, w)] < len(q) else None

    def run(self) -> None:
        world = len(self.ranks)
        while True:
            moves, heads = [], 0
            for (r, w), _ in self.pos.items():
                t = self.head(r, w)
                if t is None:
                    continue
                heads += 1
                g = self.ranks[r].k.graph
                if t.wait_event is not None and self.counters[r][t.wait_event] < g.schedule.events[t.wait_event].trigger_count:
                    continue
                if not self.ranks[r].specs[t.layer].cross_rank:
                    moves.append((r, w, "run"))
                elif (t.id, r) not in self.sent:
                    if (r, t.id) not in self.hold:
                        moves.append((r, w, "send"))
                elif all((t.id, q) in self.sent for q in range(world)):
                    moves.append((r, w, "run"))
            if not heads:
                return
            if not moves:
                raise self._deadlock()
            r, w, step = self.rng.choice(moves)
            t = self.head(r, w)
            assert t is not None
            self._step(r, t, step)
            if step == "run":
                for e in t.triggers:
                    self.counters[r][e] += 1
                self.orders[r].append(t.id)
                self.pos[(r, w)] += 1

    def _step(self, r: int, t: TaskInfo, step: str) -> None:
        rk = self.ranks[r]
        layer, spec = rk.k.graph.layers[t.layer], rk.specs[t.layer]
        views = rk.views(t)
        ins = {n: views[n] for n in layer.input_names}
        outs = {n: views[n] for n in layer.output_names}
        empty = any(views[n].numel() == 0 for n in spec.token_dims if n in views)
        peers = [other.views(t) for other in self.ranks] if spec.cross_rank else None
        ctx = EmulationContext(t.grid_idx, layer.grid, rk.k.meta, rk.k.cfg, self.index, r, len(self.ranks), peers)
        if step == "send":
            self.sent.add((t.id, r))
            if not empty:
                spec.emulate_send(ins, outs, layer.values, ctx)
            return
        if empty:
            return
        try:
            spec.emulate(ins, outs, layer.values, ctx)
        except TaskFailure as f:
            message = diagnostics.task_error_message(rk.k.graph, t.id, f.code, f.value)
            raise KernelError(f"rank {r}, emulated iteration {self.index}: {message}") from None

    def _deadlock(self) -> WatchdogError:
        lines = [
            f"emulated run of {len(self.ranks)} ranks deadlocked in iteration {self.index}: no worker of any rank can go on."
        ]
        records = []
        for r, rk in enumerate(self.ranks):
            g = rk.k.graph
            queues = g.schedule.queues
            status = torch.full((len(queues), 4), -1, dtype=torch.int64)
            progress = torch.tensor([self.index * len(q) + self.pos[(r, w)] for w, q in enumerate(queues)], dtype=torch.int64)
            for w in range(len(queues)):
                t = self.head(r, w)
                if t is None:
                    continue
                waiting_for = [q for q in range(len(self.ranks)) if (t.id, q) not in self.sent]
                remote = rk.specs[t.layer].cross_rank and (t.id, r) in self.sent and waiting_for
                local = (
                    t.wait_event is not None and self.counters[r][t.wait_event] < g.schedule.events[t.wait_event].trigger_count
                )
                if remote or local:  # else it is stuck in its own body (held): no wait to report, as on the device
                    status[w] = torch.tensor([t.id, 1, waiting_for[0] if remote else -1, -1])
            record = diagnostics.watchdog_record(
                diagnostics.ScheduleView.of(g),
                self.index,
                1,
                status,
                progress,
                lambda task, q: self.index + 1 if (task, q) in self.sent else self.index,
            )
            body = diagnostics.format_watchdog(record, self.index).splitlines()[1:]
            lines += [f"  rank {r}: {line.strip()}" for line in body]
            records += [{"at_rank": r, **entry} for entry in record]
        return WatchdogError("\n".join(lines), records)
