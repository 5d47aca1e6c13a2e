"""bench/bench_dispatch.py without a GPU: its graphs built compile-only. The chain must time the GPU's
dependent hop, so each task depends on the task before it alone, through a fixed number of tensors
(a tensor per task made every launch's host-side check of the attached tensors as long as the run)."""

from __future__ import annotations

import pytest
from cpu_helpers import bench_module

import mpk_runtime as mpk


@pytest.fixture(scope="module")
def bench():
    return bench_module("bench_dispatch")


def compiled(bench, shape: str, n: int, placement: str):
    params = mpk.PersistentKernel.get_default_init_parameters()
    params.update(test_mode=True, compile_only=True, target_cc=90, num_workers=8, placement=placement)
    pk = mpk.PersistentKernel(**params)
    bench.add_noop_graph(pk, shape, n, device="cpu")
    pk.compile()
    return pk.compiled_graph


@pytest.mark.parametrize("placement", ["locality", "round_robin"])
def test_the_chain_is_one_dependency_a_task_through_two_tensors(bench, placement):
    graph = compiled(bench, "chain", 200, placement)
    assert len(graph.tensors) == 2
    assert [t.deps for t in graph.tasks] == [()] + [((i, "raw"),) for i in range(199)]


def test_the_chain_s_placements_are_one_worker_and_a_hop_a_task(bench):
    assert {t.worker for t in compiled(bench, "chain", 20, "locality").tasks} == {0}
    workers = [t.worker for t in compiled(bench, "chain", 20, "round_robin").tasks]
    assert all(a != b for a, b in zip(workers, workers[1:]))
