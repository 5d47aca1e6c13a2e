"""The task graph as the device reads it, built on the CPU: descriptors in queue order, what each
one waits for and triggers (with the single-producer flags), slice pointers, and the kernel
parameters that point at it all."""

from __future__ import annotations

import pytest
import torch
from cpu_helpers import GraphBuilder, compile_graph

import mpk_runtime as mpk
from mpk_runtime import contract
from mpk_runtime.codegen import abi
from mpk_runtime.frontend import meta, params
from mpk_runtime.graph import CompiledGraph
from mpk_runtime.run.device_graph import DeviceGraph, LaunchConfig
from mpk_runtime.tasks import registry

CPU = torch.device("cpu")
FIELDS = [name for name, fmt in abi.TASK_DESC_FIELDS for _ in range(int(fmt[:-1] or 1))]


def build(g: GraphBuilder, workers: int = 2) -> tuple[DeviceGraph, CompiledGraph, dict[str, torch.Tensor]]:
    """(the device graph, its compiled graph, its tensors) of ``g`` dealt round robin."""
    p = params.parse(
        {
            **mpk.PersistentKernel.get_default_init_parameters(),
            "num_workers": workers,
            "placement": "round_robin",
            "watchdog_timeout": 2.5,
        }
    )
    graph = compile_graph(g.graph, workers)
    tensors = {name: t.data for name, t in g.graph.tensors.items()}
    m = meta.build(p, CPU)
    launch = LaunchConfig(p.num_workers, p.num_local_schedulers, p.watchdog_timeout)
    return DeviceGraph(graph, tensors, m, launch, meta.batch_config(p, m), CPU), graph, tensors


@pytest.fixture
def device_graph() -> tuple[DeviceGraph, CompiledGraph, dict[str, torch.Tensor]]:
    """Two producers (0 on worker 0, 1 on worker 1); task 2 needs both (one event of two), tasks
    3 and 4 need one each (events of one); round robin over two workers."""
    g = GraphBuilder()
    a, b, c, d = g.tensor("a"), g.tensor("b"), g.tensor("c", rows=1), g.tensor("d")
    g.noop([a], [b], 2)
    g.noop([b], [c], 1)
    g.noop([b], [d], 2)
    return build(g)


def descriptors(dg: DeviceGraph) -> dict[int, dict]:
    """Task id -> its unpacked descriptor fields."""
    out = {}
    for slot in range(len(dg.order)):
        raw = bytes(dg.tasks[slot * 128 : (slot + 1) * 128].tolist())
        values = abi.TASK_DESC.unpack(raw)
        d: dict = {}
        for name, v in zip(FIELDS, values):
            d.setdefault(name, []).append(v)
        d = {k: v[0] if len(v) == 1 else v for k, v in d.items()}
        out[d["task_id"]] = d
    return out


def test_descriptors_are_laid_out_by_queue(device_graph):
    dg, graph, _ = device_graph
    assert graph.schedule.queues == ((0, 2, 4), (1, 3))
    assert dg.order == [0, 2, 4, 1, 3]
    assert dg.queue_offsets.tolist() == [0, 3, 5]
    assert dg.tasks.numel() == 5 * abi.TASK_DESC.size


def test_events_of_the_fixture(device_graph):
    _, graph, _ = device_graph
    events = [(e.producers, e.consumers) for e in graph.schedule.events]
    assert events == [((0, 1), (2,)), ((0,), (3,)), ((1,), (4,))]


def test_wait_fields(device_graph):
    dg, _, _ = device_graph
    d = descriptors(dg)
    assert (d[0]["wait_event"], d[0]["wait_count"]) == (contract.NO_EVENT, 0)
    assert (d[2]["wait_event"], d[2]["wait_count"]) == (0, 2)  # both producers
    assert (d[3]["wait_event"], d[3]["wait_count"]) == (1, 1)
    assert (d[4]["wait_event"], d[4]["wait_count"]) == (2, 1)
    assert dg.wait_counts == {2: 2, 3: 1, 4: 1}


def test_trigger_fields_mark_single_producer_events(device_graph):
    """Task 0 counts into event 0 (two producers: atomic add) and sets event 1 (its alone: store)."""
    dg, _, _ = device_graph
    d = descriptors(dg)
    for task, second in ((0, 1), (1, 2)):
        assert d[task]["num_triggers"] == 2 and d[task]["first_trigger"] == 0
        assert d[task]["flags"] & abi.FLAG_FIRST_TRIGGER_SINGLE == 0
        extra = dg.triggers[d[task]["trigger_begin"]].item() & 0xFFFFFFFF
        assert extra == second | abi.TRIGGER_SINGLE
    assert all(d[t]["num_triggers"] == 0 for t in (2, 3, 4))


def test_first_trigger_single_flag():
    g = GraphBuilder()
    a, b, c = g.tensor("a", rows=1), g.tensor("b", rows=1), g.tensor("c", rows=1)
    g.noop([a], [b])
    g.noop([b], [c])  # on the other worker: waits on an event of one producer
    dg, _, _ = build(g)
    d = descriptors(dg)
    assert d[0]["flags"] & abi.FLAG_FIRST_TRIGGER_SINGLE and d[0]["num_triggers"] == 1


def test_identity_fields(device_graph):
    dg, graph, _ = device_graph
    d = descriptors(dg)
    noop = registry.get("noop").opcode
    for t in graph.tasks:
        got = d[t.id]
        assert got["task_type"] == noop and got["variant"] == t.variant and got["layer"] == t.layer
        assert got["grid_idx"] == list(t.grid_idx)


def test_slice_pointers_carry_the_byte_offsets(device_graph):
    dg, _, tensors = device_graph
    d = descriptors(dg)
    a, b, d_out = (tensors[n].data_ptr() for n in ("a", "b", "d"))
    assert d[1]["inputs"][0] == a + 4 * 4 and d[1]["outputs"][0] == b + 4 * 4  # rows 4..7 of int32
    assert d[1]["inputs"][1:] == [0] * 6 and d[1]["outputs"][1:] == [0, 0]
    assert d[4]["inputs"][0] == b + 16 and d[4]["outputs"][0] == d_out + 16


def test_kernel_parameters(device_graph):
    dg, _, _ = device_graph
    kp = dg.params
    assert (kp.num_tasks, kp.num_events, kp.num_workers) == (5, 3, 2)
    assert kp.end_trigger_count == 2 and kp.watchdog_timeout_ns == 2_500_000_000
    assert kp.tasks == dg.tasks.data_ptr() and kp.queue_offsets == dg.queue_offsets.data_ptr()
    assert dg.event_counters.tolist() == [0, 0, 0] and dg.worker_status.tolist() == [[-1] * 4, [-1] * 4]


def test_set_wait_count_rewrites_one_descriptor(device_graph):
    dg, _, _ = device_graph
    dg.set_wait_count(2, 3)
    d = descriptors(dg)
    assert d[2]["wait_count"] == 3 and d[3]["wait_count"] == 1
    with pytest.raises(ValueError, match="task 0 waits on no event"):
        dg.set_wait_count(0, 1)


def test_reset_clears_counters_and_status(device_graph):
    dg, _, _ = device_graph
    dg.event_counters.fill_(9)
    dg.worker_progress.fill_(4)
    dg.worker_status.fill_(2)
    dg.reset()
    assert not dg.event_counters.any() and not dg.worker_progress.any()
    assert dg.worker_status.eq(-1).all()
