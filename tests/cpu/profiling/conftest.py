"""Fixtures of the profiling tests: a Python port of the device's recorder (so synthetic buffers
are laid out exactly as csrc/runtime/profiler.cuh writes them), a small task graph dict, and one
real compile (nvcc, compile_only) whose task_graph JSON the graph tool reads."""

from __future__ import annotations

import json

import pytest
import torch

from mpk_runtime import contract
from mpk_runtime.graph.compiled import CompiledGraph, LayerInfo, ScheduleInfo, TaskInfo


class DeviceRecorder:
    """``profiler::record`` in Python: equal regions per recorder, ``attempted`` first, a record
    stored only when it fits; bit for bit what the kernel writes."""

    def __init__(self, capacity: int, num_workers: int, num_schedulers: int = 1):
        self.words = [0] * capacity
        self.num_workers, self.num_schedulers = num_workers, num_schedulers
        self.region_words = capacity // (num_workers + num_schedulers)

    def record(self, region: int, kind: int, id_: int, iteration: int, ts: int) -> None:
        size = self.region_words
        base = region * size
        n = self.words[base]
        self.words[base] = n + 1
        if 1 + 2 * (n + 1) <= size:
            self.words[base + 1 + 2 * n] = ts
            self.words[base + 2 + 2 * n] = id_ | (kind & 0xFF) << 32 | (iteration & 0xFFFFFF) << 40

    def task(self, worker: int, task: int, begin: int, end: int, iteration: int = 0) -> None:
        self.record(worker, contract.PROF_TASK_BEGIN, task, iteration, begin)
        self.record(worker, contract.PROF_TASK_END, task, iteration, end)

    def mark(self, worker: int, phase: int, ts: int, iteration: int = 0) -> None:
        """A task body's Runtime::mark(phase), between its task's begin and end records."""
        self.record(worker, contract.PROF_TASK_MARK, phase, iteration, ts)

    def prepare(self, iteration: int, begin: int, end: int) -> None:
        region = self.num_workers  # scheduler 0, the controller
        self.record(region, contract.PROF_PREPARE_BEGIN, iteration, iteration, begin)
        self.record(region, contract.PROF_PREPARE_END, iteration, iteration, end)

    def tensor(self) -> torch.Tensor:
        return torch.tensor(self.words, dtype=torch.uint64)


@pytest.fixture(scope="session")
def recorder():
    """The DeviceRecorder class: ``recorder(capacity, num_workers, num_schedulers=1)``.
    Session-scoped because it is stateless (Hypothesis tests use it)."""
    return DeviceRecorder


@pytest.fixture
def graph() -> CompiledGraph:
    """A compiled graph with what the profiler reads: rmsnorm_0 (tasks 0, 1), noop_0 (task 2),
    noop_1 (task 3); two task types, two workers."""
    layers = tuple(
        LayerInfo(i, name, task, opcode, (n, 1, 1), {}, (), (), first, n, ())
        for i, (name, task, opcode, first, n) in enumerate(
            [("rmsnorm_0", "rmsnorm", 2, 0, 2), ("noop_0", "noop", 1, 2, 1), ("noop_1", "noop", 1, 3, 1)]
        )
    )
    tasks = tuple(
        TaskInfo(i, label, layer, variant, (0, 0, 0), (), (), (), i % 2, None, ())
        for i, (label, layer, variant) in enumerate(
            [("rmsnorm_0[0]", 0, 0), ("rmsnorm_0[1]", 0, 0), ("noop_0[0]", 1, 1), ("noop_1[0]", 2, 1)]
        )
    )
    schedule = ScheduleInfo("round_robin", 2, ((0, 2), (1, 3)), 2, ())
    return CompiledGraph("sm90", 0, (), layers, (), tasks, schedule)


@pytest.fixture(scope="session")
def compiled_graph(tmp_path_factory, mpk_cache_dir):
    """task_graph_rank0.json of a real compile_only build (sm90, 4 workers, round robin, so tasks
    cross workers and wait on events): a chain of three single-task noop layers, then a fan-out
    to 4 tasks and a fan-in back to one. Once per session, its module from the session's cache (a
    noop graph's: nvcc takes seconds the first time, a later run finds it)."""
    from mpk_runtime import PersistentKernel

    root = tmp_path_factory.mktemp("compiled")
    params = PersistentKernel.get_default_init_parameters()
    params.update(compile_only=True, target_cc=90, num_workers=4, num_local_schedulers=2, placement="round_robin")
    pk = PersistentKernel(**params)
    x = [pk.attach_input(torch.zeros(4, dtype=torch.int32), f"x{i}") for i in range(4)]
    wide = pk.attach_input(torch.zeros(4, dtype=torch.int32), "wide")
    sink = pk.attach_input(torch.zeros(1, dtype=torch.int32), "sink")
    for i in range(3):
        pk.noop_layer([x[i]], [x[i + 1]], grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    pk.noop_layer([x[3]], [wide], grid_dim=(4, 1, 1), block_dim=pk.block_dim)  # fan-out
    pk.noop_layer([wide], [sink], grid_dim=(1, 1, 1), block_dim=pk.block_dim)  # fan-in
    pk.compile(output_dir=root / "out")
    path = root / "out" / "task_graph_rank0.json"
    return path, json.loads(path.read_text())
