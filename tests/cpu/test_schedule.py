"""Placement and events: locality keeps chains on one worker and spreads wide layers, round_robin
deals tasks in turn, events are shared by producer set, and same-worker producers need no event."""

from __future__ import annotations

import json

import pytest
from cpu_helpers import GraphBuilder, compile_graph

from mpk_runtime.errors import ConfigError
from mpk_runtime.graph.schedule import POLICIES, build_schedule


def chain(width: int, depth: int) -> GraphBuilder:
    """``depth`` elementwise layers of ``width`` tasks: task k of each layer reads task k's slice."""
    g = GraphBuilder()
    ts = [g.tensor(f"t{i}", rows=width) for i in range(depth + 1)]
    for i in range(depth):
        g.noop([ts[i]], [ts[i + 1]], width)
    return g


@pytest.mark.parametrize(("width", "workers"), [(4, 4), (8, 4), (16, 16), (1, 4)])
def test_locality_keeps_elementwise_chains_on_one_worker(width, workers):
    g = chain(width, depth=3)
    s = build_schedule(g.graph, workers, "locality")
    columns = [{s.worker_of[layer * width + k] for layer in range(3)} for k in range(width)]
    assert all(len(c) == 1 for c in columns), columns
    assert s.events == [] and all(e is None for e in s.wait_event)  # nothing crosses workers


def test_locality_spreads_a_wide_layer_over_all_workers():
    g = GraphBuilder()
    a, b = g.tensor("a", rows=64), g.tensor("b", rows=64)
    g.noop([a], [b], 64)
    s = build_schedule(g.graph, 8, "locality")
    assert sorted(len(q) for q in s.queues) == [8] * 8


def test_locality_spreads_fan_out_after_a_single_producer():
    g = GraphBuilder()
    src, mid, wide = g.tensor("src", rows=1), g.tensor("mid", rows=32), g.tensor("wide", rows=32)
    g.noop([src], [mid], 1)
    g.noop([mid], [wide], 32)
    s = build_schedule(g.graph, 4, "locality")
    assert {s.worker_of[t] for t in range(1, 33)} == {0, 1, 2, 3}


@pytest.mark.parametrize("workers", [1, 3, 5])
def test_round_robin_deals_tasks_in_turn(workers):
    g = chain(width=4, depth=3)
    s = build_schedule(g.graph, workers, "round_robin")
    assert s.worker_of == [i % workers for i in range(12)]
    assert s.queues == [[i for i in range(12) if i % workers == w] for w in range(workers)]


@pytest.mark.parametrize("policy", POLICIES)
def test_queues_hold_every_task_once_in_program_order(policy):
    g = chain(width=8, depth=4)
    s = build_schedule(g.graph, 3, policy)
    assert sorted(t for q in s.queues for t in q) == list(range(len(g.graph.tasks)))
    assert all(q == sorted(q) for q in s.queues)
    assert all(s.worker_of[t] == w for w, q in enumerate(s.queues) for t in q)


def test_events_are_deduplicated_by_producer_set():
    """Each producer's slice is read by two consumers: consumers with the same producer share its
    event; the one that shares its producer's worker waits on none."""
    g = GraphBuilder()
    a, b, c = g.tensor("a", rows=4), g.tensor("b", rows=4), g.tensor("c", rows=4)
    g.noop([a], [b], 2)  # tasks 0 (w0), 1 (w1)
    g.noop([b], [c], 4)  # tasks 2 (w2), 3 (w3) read task 0's rows; 4 (w0), 5 (w1) read task 1's
    s = build_schedule(g.graph, 4, "round_robin")
    assert [(e.producers, e.consumers, e.trigger_count) for e in s.events] == [([0], [2, 3], 1), ([1], [4], 1)]
    assert s.wait_event == [None, None, 0, 0, 1, None]
    assert s.triggers == [[0], [1], [], [], [], []]


def test_shared_producer_set_shares_the_event():
    g = GraphBuilder()
    a, b, c, d = g.tensor("a"), g.tensor("b"), g.tensor("c", rows=1), g.tensor("d", rows=1)
    g.noop([a], [b], 2)  # tasks 0 (w0), 1 (w1)
    g.noop([b], [c], 1)  # task 2 (w0): needs 0 and 1
    g.noop([b], [d], 1)  # task 3 (w1): needs 0 and 1 too
    s = build_schedule(g.graph, 2, "round_robin")
    assert s.wait_event[2] == s.wait_event[3] == 0
    assert len(s.events) == 1
    assert s.events[0].producers == [0, 1] and s.events[0].consumers == [2, 3] and s.events[0].trigger_count == 2
    assert s.triggers[0] == [0] and s.triggers[1] == [0] and s.triggers[2] == s.triggers[3] == []


def test_producers_on_the_own_worker_need_no_event():
    g = chain(width=2, depth=2)  # tasks 0, 1 then 2 (reads 0), 3 (reads 1)
    s = build_schedule(g.graph, 2, "round_robin")  # 0, 2 on worker 0; 1, 3 on worker 1
    assert s.wait_event == [None, None, None, None]
    assert s.triggers == [[], [], [], []] and s.events == []


def test_a_producer_elsewhere_needs_an_event_with_one_producer():
    g = chain(width=2, depth=2)
    s = build_schedule(g.graph, 3, "round_robin")  # 0 -> w0, 2 -> w2; 1 -> w1, 3 -> w0
    assert s.wait_event[2] is not None and s.wait_event[3] is not None
    assert [s.events[s.wait_event[t]].producers for t in (2, 3)] == [[0], [1]]
    assert s.events[s.wait_event[2]].trigger_count == 1


def test_mixed_producers_wait_on_the_whole_set():
    """A task with one producer on its own worker and one elsewhere waits for both (one event)."""
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c", rows=1)
    g.noop([a], [b], 2)  # 0 -> w0, 1 -> w1
    g.noop([b], [c], 1)  # 2 -> w0
    s = build_schedule(g.graph, 2, "round_robin")
    assert s.events[s.wait_event[2]].producers == [0, 1]


def test_unknown_policy():
    with pytest.raises(ConfigError, match=r"placement='fifo' is not a scheduling policy; use one of locality, round_robin"):
        build_schedule(chain(1, 1).graph, 1, "fifo")


def test_schedule_json():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c", rows=1)
    g.noop([a], [b], 2)
    g.noop([b], [c], 1)
    data = json.loads(json.dumps(compile_graph(g.graph, 3).to_json()))["schedule"]
    assert data["policy"] == "round_robin" and data["num_workers"] == 3
    assert data["queues"] == [[0], [1], [2]]
    assert data["end_of_task_graph"]["trigger_count"] == 3  # one per worker with a non-empty queue
    assert data["events"] == [{"id": 0, "trigger_count": 2, "producers": [0, 1], "consumers": [2]}]


def test_end_of_task_graph_counts_only_busy_workers():
    assert compile_graph(chain(width=2, depth=1).graph, 8).schedule.end_trigger_count == 2
