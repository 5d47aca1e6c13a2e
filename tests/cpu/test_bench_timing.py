"""bench/timing.py without a GPU (CUDA events faked): a device-bound measurement that the host
paced is reported on stderr and saved with the results; one the GPU paced is not."""

from __future__ import annotations

import json
import time

import pytest
import torch
from cpu_helpers import bench_module


@pytest.fixture
def timing(monkeypatch):
    return bench_module("timing")  # a fresh module: HOST_BOUND starts empty


def fake_gpu(monkeypatch, us_per_call: float, reps: int) -> None:
    """CUDA events whose round takes us_per_call * reps on the 'GPU'; synchronize does nothing."""

    class Event:
        def __init__(self, enable_timing: bool = False):
            pass

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, end) -> float:  # milliseconds
            return us_per_call * reps / 1e3

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)


def test_a_host_bound_figure_is_said_and_saved(timing, monkeypatch, capsys, tmp_path):
    fake_gpu(monkeypatch, us_per_call=5.0, reps=4)

    def launch():
        time.sleep(200e-6)  # the host takes far longer to issue a call than the 'GPU' to run it

    assert timing.time_us(launch, reps=4, warmup=1, rounds=3, device_bound=True) == pytest.approx(5.0)
    assert "HOST-BOUND" in capsys.readouterr().err
    [entry] = timing.HOST_BOUND
    assert entry["call"].endswith("launch") and entry["host_us"] > entry["gpu_us"] == pytest.approx(5.0)
    monkeypatch.setenv("OUT", str(tmp_path))
    timing.save("bench_x", {"rows": [1]})
    saved = json.loads((tmp_path / "bench_x.json").read_text())
    assert saved["rows"] == [1] and saved["host_bound"] == [entry]


def test_a_device_bound_figure_is_not_marked(timing, monkeypatch, capsys, tmp_path):
    fake_gpu(monkeypatch, us_per_call=1e6, reps=2)  # a second a call on the 'GPU'
    assert timing.time_us(lambda: None, reps=2, warmup=1, rounds=3, device_bound=True) == pytest.approx(1e6)
    assert "HOST-BOUND" not in capsys.readouterr().err and timing.HOST_BOUND == []
    monkeypatch.setenv("OUT", str(tmp_path))
    timing.save("bench_y", {})
    assert json.loads((tmp_path / "bench_y.json").read_text())["host_bound"] == []


def test_a_host_of_several_gpus_gives_one_driver(timing, monkeypatch):
    """nvidia-smi prints a line a GPU; the results had kept them all ("580.159.04\\n580.159.04" on
    2 x H200)."""
    import subprocess
    import types

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(name="NVIDIA H200", multi_processor_count=132)
    )
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout="580.159.04\n580.159.04\n", returncode=0))
    assert timing.device_facts()["driver"] == "580.159.04"


def test_a_goal_is_not_judged_from_host_bound_figures(timing, monkeypatch, capsys):
    assert timing.judged("met") == "met" and timing.judged("NOT met") == "NOT met"
    fake_gpu(monkeypatch, us_per_call=5.0, reps=4)
    timing.time_us(lambda: time.sleep(200e-6), reps=4, warmup=1, rounds=3, device_bound=True)
    capsys.readouterr()
    for verdict in ("met", "NOT met", "BELOW TARGET"):
        assert timing.judged(verdict) == "not judged: 1 timing(s) host-bound (host_bound in the JSON)"
