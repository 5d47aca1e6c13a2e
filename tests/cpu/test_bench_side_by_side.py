"""bench/layer_bench.side_by_side: when independent copies of a layer overlap, so that the benches'
per-copy time is a throughput rather than one layer's latency."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def layer_bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # layer_bench imports its neighbour timing.py
    import layer_bench

    yield layer_bench
    sys.modules.pop("layer_bench", None)


@pytest.mark.parametrize(
    "tasks, workers, copies",
    [(128, 131, 1), (131, 131, 1), (512, 131, 1), (65, 131, 2), (64, 131, 2), (32, 131, 4), (1, 8, 8), (0, 8, 8)],
)
def test_copies_that_fit_the_workers_at_once(layer_bench, tasks, workers, copies):
    assert layer_bench.side_by_side(tasks, workers) == copies
