"""A simulator of the device protocol, run on random no-op DAGs under every placement policy.

The model follows csrc/runtime/worker.cuh and scheduler.cuh: every worker runs its queue in order,
every iteration; a task with a wait event starts once that event's counter reached
``trigger_count * (iteration + 1)``; a finished task increments every event it triggers; a worker
that drained its queue counts one END_OF_TASK_GRAPH increment, and the controller releases the next
iteration once every worker with a non-empty queue did. Workers interleave at random.
"""

from __future__ import annotations

import copy
import random

import pytest
from cpu_helpers import GraphBuilder
from hypothesis import given
from hypothesis import strategies as st

from mpk_runtime.graph import TaskGraph
from mpk_runtime.graph.schedule import POLICIES, Schedule, build_schedule


class Deadlock(AssertionError):
    pass


class OrderViolation(AssertionError):
    pass


def simulate(graph: TaskGraph, s: Schedule, iterations: int, rng: random.Random) -> list[tuple[str, int, int]]:
    """Run ``iterations`` iterations; returns the log of ("start" | "finish", task, iteration)."""
    workers = range(s.num_workers)
    counters = [0] * len(s.events)
    pos = [0] * s.num_workers  # next queue slot of each worker
    iteration = [0] * s.num_workers  # the iteration each worker is in
    running: list[int | None] = [None] * s.num_workers
    busy = sum(1 for q in s.queues if q)
    end_count, released = 0, 1
    finished: set[tuple[int, int]] = set()
    log = []
    while True:
        actions = []
        for w in workers:
            q = s.queues[w]
            if running[w] is not None:
                actions.append(("finish", w))
            elif iteration[w] < min(released, iterations):
                if pos[w] == len(q):
                    actions.append(("drain", w))
                    continue
                e = s.wait_event[q[pos[w]]]
                if e is None or counters[e] >= s.events[e].trigger_count * (iteration[w] + 1):
                    actions.append(("start", w))
        if not actions:
            if all(i == iterations for i in iteration):
                return log
            waiting = {w: s.queues[w][pos[w]] for w in workers if iteration[w] < iterations and pos[w] < len(s.queues[w])}
            raise Deadlock(f"no worker can move; waiting (worker: task): {waiting}, counters {counters}")
        kind, w = rng.choice(actions)
        it = iteration[w]
        if kind == "start":
            t = s.queues[w][pos[w]]
            missing = [p for p in graph.tasks[t].deps if (p, it) not in finished]
            if missing:
                raise OrderViolation(f"task {t} started in iteration {it} before its producers {missing} finished")
            running[w] = t
            log.append(("start", t, it))
        elif kind == "finish":
            t = running[w]
            running[w] = None
            pos[w] += 1
            finished.add((t, it))
            for e in s.triggers[t]:
                counters[e] += 1
            log.append(("finish", t, it))
        else:  # drained: END_OF_TASK_GRAPH increment, then wait for the next iteration's release
            pos[w] = 0
            iteration[w] += 1
            if s.queues[w]:
                end_count += 1
            if end_count == busy * released:
                released += 1
        assert all(c <= e.trigger_count * iterations for c, e in zip(counters, s.events))


@st.composite
def noop_dags(draw):
    """Layers of random widths reading 1..3 earlier int32 tensors of 8 rows; a few write in place
    into an earlier tensor (write-after-read and write-after-write hazards)."""
    g = GraphBuilder()
    tensors = [g.tensor("t0")]
    for _ in range(draw(st.integers(1, 12))):
        k = draw(st.integers(1, min(3, len(tensors))))
        ins = draw(st.lists(st.sampled_from(tensors), min_size=k, max_size=k, unique_by=lambda t: t.name))
        if draw(st.integers(0, 4)) == 0:
            out = draw(st.sampled_from(tensors))
        else:
            out = g.tensor(f"t{len(tensors)}")
            tensors.append(out)
        g.noop(ins, [out], draw(st.sampled_from([1, 2, 4, 8])))
    return g.graph


@given(
    graph=noop_dags(),
    policy=st.sampled_from(POLICIES),
    workers=st.integers(1, 6),
    iterations=st.integers(1, 3),
    rng=st.randoms(use_true_random=False),
)
def test_protocol_never_deadlocks_and_respects_dependencies(graph, policy, workers, iterations, rng):
    s = build_schedule(graph, workers, policy)
    log = simulate(graph, s, iterations, rng)
    assert sorted((t, i) for kind, t, i in log if kind == "finish") == [
        (t, i) for t in range(len(graph.tasks)) for i in range(iterations)
    ]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(3))
def test_wide_fan_in_fan_out(policy, seed):
    g = GraphBuilder()
    src, mid, wide, sink = g.tensor("src", rows=1), g.tensor("mid", rows=64), g.tensor("wide", rows=64), g.tensor("s", 1)
    g.noop([src], [mid], 1)
    g.noop([mid], [wide], 64)
    g.noop([wide], [sink], 1)
    s = build_schedule(g.graph, 7, policy)
    log = simulate(g.graph, s, 2, random.Random(seed))
    assert log[-1] == ("finish", 65, 1)  # the sink is the last task of the last iteration


def chain_schedule() -> tuple[TaskGraph, Schedule]:
    g = GraphBuilder()
    a, b, c = g.tensor("a", rows=1), g.tensor("b", rows=1), g.tensor("c", rows=1)
    g.noop([a], [b], 1)
    g.noop([b], [c], 1)
    return g.graph, build_schedule(g.graph, 2, "round_robin")  # task 1 waits for task 0 across workers


def test_simulator_detects_a_missing_wait():
    """The checker is not vacuous: dropping the one event lets task 1 overtake task 0."""
    graph, s = chain_schedule()
    broken = copy.deepcopy(s)
    broken.wait_event[1] = None
    seen = []
    for seed in range(20):
        try:
            simulate(graph, broken, 1, random.Random(seed))
        except OrderViolation as e:
            seen.append(str(e))
    assert seen and "task 1 started in iteration 0 before its producers [0] finished" in seen[0]


def test_simulator_detects_an_unreachable_count():
    graph, s = chain_schedule()
    broken = copy.deepcopy(s)
    broken.events[0].producers.append(0)  # trigger_count 2, but only one producer triggers it
    with pytest.raises(Deadlock, match=r"waiting \(worker: task\): \{1: 1\}"):
        simulate(graph, broken, 1, random.Random(0))
