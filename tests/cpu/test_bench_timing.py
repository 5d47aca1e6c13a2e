"""bench/timing.py without a GPU (CUDA events and the spin faked): a device-bound measurement holds
the GPU in a spin while the host issues the calls, so a slow host does not pace it; one the host
still paced is reported on stderr and saved with the results; one the GPU paced is not."""

from __future__ import annotations

import json
import time

import pytest
import torch
from cpu_helpers import bench_module


@pytest.fixture
def timing(monkeypatch):
    return bench_module("timing")  # a fresh module: HOST_BOUND starts empty


class FakeGpu:
    """A 'GPU' that never waits for the host: its clock moves by what a call runs (``run``) and by the
    spins of torch.cuda._sleep; CUDA events read that clock, and synchronize does nothing."""

    CYCLES_PER_US = 1000

    def __init__(self, monkeypatch):
        self.now_us = 0.0
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                self.at = 0.0

            def record(self):
                self.at = gpu.now_us

            def synchronize(self):
                pass

            def elapsed_time(self, end) -> float:  # milliseconds
                return (end.at - self.at) / 1e3

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
        monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: self.run(cycles / self.CYCLES_PER_US))

    def run(self, us: float) -> None:
        self.now_us += us


def host_that_slows_down(gpu: FakeGpu):
    """A launch of 5 us on the 'GPU' whose host slows to 5 ms a call after the warm-up and the round
    that sets the spin (5 calls): the spin, set from the fast round, cannot cover it."""
    calls = []

    def launch():
        calls.append(1)
        if len(calls) > 5:
            time.sleep(5e-3)
        gpu.run(5.0)

    return launch


def test_a_slow_host_is_held_back_by_a_spin_and_the_figure_is_the_gpu_s(timing, monkeypatch, capsys):
    gpu = FakeGpu(monkeypatch)

    def launch():
        time.sleep(1e-3)  # the host takes far longer to issue a call than the 'GPU' to run it
        gpu.run(5.0)

    assert timing.time_us(launch, reps=4, warmup=1, rounds=3, device_bound=True) == pytest.approx(5.0)
    assert "HOST-BOUND" not in capsys.readouterr().err and timing.HOST_BOUND == []


def test_the_first_call_after_the_spin_is_not_timed(timing, monkeypatch, capsys):
    """Where ranks meet in a launch, each rank's spin ends when its own host's issue says: the first
    launch after it waits for the other rank's spin. It must not count."""
    gpu = FakeGpu(monkeypatch)
    spun = []
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: (spun.append(1), gpu.run(cycles / gpu.CYCLES_PER_US)))

    def launch():
        gpu.run(400.0 if spun else 5.0)  # the first launch after a spin waits 395 us for the peer's
        spun.clear()

    assert timing.time_us(launch, reps=4, warmup=1, rounds=3, device_bound=True) == pytest.approx(5.0)
    assert timing.HOST_BOUND == []


def test_a_host_that_outlasts_the_spin_is_said_and_saved(timing, monkeypatch, capsys, tmp_path):
    launch = host_that_slows_down(FakeGpu(monkeypatch))
    assert timing.time_us(launch, reps=4, warmup=1, rounds=3, device_bound=True) == pytest.approx(5.0)
    assert "HOST-BOUND" in capsys.readouterr().err
    [entry] = timing.HOST_BOUND
    assert entry["call"].endswith("launch") and entry["host_us"] > entry["gpu_us"] == pytest.approx(5.0)
    monkeypatch.setenv("OUT", str(tmp_path))
    timing.save("bench_x", {"rows": [1]})
    saved = json.loads((tmp_path / "bench_x.json").read_text())
    assert saved["rows"] == [1] and saved["host_bound"] == [entry]


def test_a_device_bound_figure_is_not_marked(timing, monkeypatch, capsys, tmp_path):
    gpu = FakeGpu(monkeypatch)
    assert timing.time_us(lambda: gpu.run(1e6), reps=2, warmup=1, rounds=3, device_bound=True) == pytest.approx(1e6)
    assert "HOST-BOUND" not in capsys.readouterr().err and timing.HOST_BOUND == []
    monkeypatch.setenv("OUT", str(tmp_path))
    timing.save("bench_y", {})
    assert json.loads((tmp_path / "bench_y.json").read_text())["host_bound"] == []


def test_without_device_bound_no_spin_is_queued(timing, monkeypatch, capsys):
    """Without device_bound (torch eager) nothing holds the GPU back: the time is what the calls take,
    the host's issue included, and no spin is queued."""
    gpu = FakeGpu(monkeypatch)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: pytest.fail("no spin without device_bound"))
    assert timing.time_us(lambda: gpu.run(3.0), reps=4, warmup=1, rounds=3) == pytest.approx(3.0)
    assert timing.HOST_BOUND == []


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
    timing.time_us(host_that_slows_down(FakeGpu(monkeypatch)), reps=4, warmup=1, rounds=3, device_bound=True)
    capsys.readouterr()
    for verdict in ("met", "NOT met", "BELOW TARGET"):
        assert timing.judged(verdict) == "not judged: 1 timing(s) host-bound (host_bound in the JSON)"


def spins_counted(timing, gpu: FakeGpu, monkeypatch) -> list[int]:
    """The spins time_us queues, one a round (the clock's calibration taken as done)."""
    timing._CYCLES_PER_US.append(FakeGpu.CYCLES_PER_US)
    spins: list[int] = []
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: (spins.append(cycles), gpu.run(cycles / gpu.CYCLES_PER_US)))
    return spins


def test_a_round_the_host_stalled_in_is_run_again_not_counted(timing, monkeypatch, capsys):
    """A host that stalls once (a page fault, another process) outlasts one round's spin: the GPU may have
    waited in that round, so it is not counted and one more is run, and the figure is not marked."""
    gpu = FakeGpu(monkeypatch)
    spins = spins_counted(timing, gpu, monkeypatch)
    calls = []

    def launch():
        calls.append(1)
        if len(calls) == 7:  # warm-up 1, issue round 4, the first round's untimed call: its second timed one
            time.sleep(20e-3)
            gpu.run(500.0)  # the GPU waited for it
        gpu.run(5.0)

    assert timing.time_us(launch, reps=4, warmup=1, rounds=2, device_bound=True) == pytest.approx(5.0)
    assert len(spins) == 3 and "HOST-BOUND" not in capsys.readouterr().err and timing.HOST_BOUND == []


class RanksWhereAnotherStalls:
    """timing.mpi_ranks' channel on rank 0 of two, whose rank 1 outlasted its spin in the first round."""

    def __init__(self):
        self.said: list[bool] = []

    def exchange(self, purpose: str, payload, timeout: float) -> list:
        self.said.append(payload)
        return [payload, len(self.said) == 1]


def test_every_rank_runs_a_round_again_when_one_must(timing, monkeypatch, capsys):
    """Ranks' launches meet: were only the stalled rank to run a round again, its launches would wait for
    peers that had gone on. So a round one rank does not count is run again on all of them."""
    gpu = FakeGpu(monkeypatch)
    spins = spins_counted(timing, gpu, monkeypatch)
    ranks = RanksWhereAnotherStalls()
    assert timing.time_us(lambda: gpu.run(5.0), reps=4, warmup=1, rounds=3, device_bound=True, ranks=ranks) == pytest.approx(5.0)
    assert ranks.said == [False] * 4 and len(spins) == 4
    assert "HOST-BOUND" not in capsys.readouterr().err and timing.HOST_BOUND == []


def test_a_host_that_outlasts_every_spin_stops_after_as_many_rounds_again(timing, monkeypatch, capsys):
    gpu = FakeGpu(monkeypatch)
    spins = spins_counted(timing, gpu, monkeypatch)
    assert timing.time_us(host_that_slows_down(gpu), reps=4, warmup=1, rounds=3, device_bound=True) == pytest.approx(5.0)
    assert len(spins) == 3 and "3 round(s) of 3 outlasted their spin" in capsys.readouterr().err
    assert [e["rounds_outlasted"] for e in timing.HOST_BOUND] == [3]
