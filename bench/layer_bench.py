"""Timing one layer inside the megakernel, next to its torch equivalent, in the same run.

``measure`` (big layers: throughput):

A launch holds L independent copies of the layer (each its own tensors, so together they exceed
L2); the time of one copy is (T(L) - T(1)) / (L - 1), which removes the launch's fixed cost
(start, prepare_next_batch, termination). The torch side runs the same op over the same L tensor
sets in rotation. Bandwidth counts the bytes each copy must move (inputs once, outputs once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import mpk_runtime as mpk
from mpk_runtime.profile.stats import PhaseRow, Row, read_csv, read_phases_csv

import span_phases
import timing


@dataclass
class Result:
    name: str
    mpk_us: float
    torch_us: float
    bytes: int
    copy_tbps: float

    @property
    def mpk_tbps(self) -> float:
        return self.bytes / (self.mpk_us * 1e-6) / 1e12

    @property
    def torch_tbps(self) -> float:
        return self.bytes / (self.torch_us * 1e-6) / 1e12

    def row(self) -> dict:
        return {
            "case": self.name,
            "mpk_us": self.mpk_us,
            "torch_us": self.torch_us,
            "bytes": self.bytes,
            "mpk_TBps": self.mpk_tbps,
            "torch_TBps": self.torch_tbps,
            "copy_TBps": self.copy_tbps,
            "mpk_pct_of_copy": 100 * self.mpk_tbps / self.copy_tbps,
            "speedup_vs_torch": self.torch_us / self.mpk_us,
        }

    def line(self) -> str:
        pct = 100 * self.mpk_tbps / self.copy_tbps
        return (
            f"{self.name:28} mpk {self.mpk_us:8.2f} us {self.mpk_tbps:5.2f} TB/s ({pct:3.0f}% of copy) | "
            f"torch {self.torch_us:8.2f} us {self.torch_tbps:5.2f} TB/s | torch/mpk {self.torch_us / self.mpk_us:4.2f}"
        )


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in TB/s, counting bytes read plus bytes written."""
    src = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    us = timing.time_us(lambda: dst.copy_(src), reps=10, warmup=3)
    return 2 * src.numel() * src.element_size() / (us * 1e-6) / 1e12


def kernel(**overrides) -> mpk.PersistentKernel:
    params = mpk.PersistentKernel.get_default_init_parameters()
    workers, schedulers = mpk.get_configurations_from_gpu(0)
    params.update(test_mode=True, num_workers=workers, num_local_schedulers=schedulers)
    params.update(overrides)
    return mpk.PersistentKernel(**params)


def launch_us(build: Callable[[mpk.PersistentKernel, int], None], copies: int, reps: int = 20, **params) -> float:
    pk = kernel(**params)
    for i in range(copies):
        build(pk, i)
    pk.compile()
    us = timing.time_us(pk, reps=reps, warmup=3, device_bound=True)
    pk.synchronize()
    pk.finalize()
    return us


def measure(
    name: str,
    build: Callable[[mpk.PersistentKernel, int], None],
    torch_op: Callable[[int], None],
    nbytes: int,
    copies: int,
    copy_tbps: float,
    **params,
) -> Result:
    one = launch_us(build, 1, **params)
    many = launch_us(build, copies, **params)
    return Result(name, (many - one) / (copies - 1), torch_rotation_us(torch_op, copies), nbytes, copy_tbps)


def torch_rotation_us(torch_op: Callable[[int], None], copies: int) -> float:
    """The torch op's time per call, run over the `copies` tensor sets in rotation."""
    k = [0]

    def rotate():
        torch_op(k[0] % copies)
        k[0] += 1

    return timing.time_us(rotate, reps=100, warmup=10)


def profiled_runs(
    build: Callable[[mpk.PersistentKernel, int], None], launches: int = 20, **params
) -> list[tuple[list[Row], list[PhaseRow]]]:
    """Copy 0 alone in a profiled launch, `launches` times: each launch's task rows and phase rows
    (its profile CSVs)."""
    import tempfile

    prof = torch.zeros(1 << 20, dtype=torch.uint64, device="cuda")
    pk = kernel(profiler_tensor=prof, trace_name=str(Path(tempfile.mkdtemp()) / "trace"), **params)
    build(pk, 0)
    pk.compile()
    runs = []
    for _ in range(launches):
        pk()
        pk.synchronize()  # writes the CSVs of this launch
        runs.append((read_csv(pk.profile_paths["csv"]), read_phases_csv(pk.profile_paths["phases"])))
    pk.finalize()
    return runs


def span_us(build: Callable[[mpk.PersistentKernel, int], None], launches: int = 20, **params) -> float:
    """One copy's latency inside the megakernel: the median span of launches that hold copy 0 alone
    (a launch's first task's begin to its last task's end, so without the launch's fixed cost)."""
    return span_phases.span_phases(profiled_runs(build, launches, **params))["span_us"]


def side_by_side(tasks: int, workers: int) -> int:
    """How many independent copies of a layer of `tasks` tasks the workers run at once. From 2 on,
    measure's (T(n) - T(1)) / (n - 1) is a throughput (copies overlap), not one copy's latency."""
    return max(1, workers // max(1, tasks))


def measure_latency(
    name: str,
    build: Callable[[mpk.PersistentKernel, int], None],
    torch_op: Callable[[int], None],
    nbytes: int,
    copies: int,
    copy_tbps: float,
    launches: int = 20,
    **params,
) -> Result:
    """For layers too small to difference (their copies would run side by side): span_us of one
    copy, against the torch op."""
    return Result(name, span_us(build, launches, **params), torch_rotation_us(torch_op, copies), nbytes, copy_tbps)
