"""Timing helpers shared by the benchmarks: CUDA events, warm-up, medians, device facts."""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch


def mpi_ranks(script: str):
    """A benchmark's MPI job, one rank per GPU (this rank's GPU made current): the ranks' message
    channel, or exit with how to start it. NVLink multicast stays off on the device machines."""
    from mpk_runtime.harness import mpi_job, mpi_world

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    for key in ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        os.environ.setdefault(key, "1")
    job, world = mpi_job(), mpi_world()
    if world is None or job is None:
        raise SystemExit(f"run under MPI, one rank per GPU: mpirun -n 2 python bench/{script}")
    torch.cuda.set_device(job[2] % torch.cuda.device_count())
    return world


# Every host-bound measurement of this process (time_us with device_bound): save() writes them into the
# results, so that a figure timed on the host is marked there, not only on stderr.
HOST_BOUND: list[dict] = []


def time_us(fn, reps: int = 100, warmup: int = 10, rounds: int = 5, device_bound: bool = False, ranks=None) -> float:
    """Median over ``rounds`` of the mean time of ``reps`` back-to-back calls, in microseconds.

    ``device_bound``: ``fn`` only enqueues GPU work (a megakernel launch, a graph replay), so the figure
    must be the GPU's alone. A launch costs the host 10-15 us for a small graph (a 2 x H200 host,
    2026-11-30; more with many tensors to check), about as long as a short launch runs, so the GPU would
    wait for the host between calls. So a first round, not counted, measures how long the host takes to
    issue ``reps`` calls; each counted round then holds the GPU in a spin (torch.cuda._sleep) twice as
    long as that while the host issues the round behind it, and times the calls after the first (where
    ranks meet in a launch, the first absorbs the difference between the ends of their spins, each as
    long as its own host's issue).

    A round whose host outlasted its spin may have let the GPU wait (a host that stalled once: one round
    of five did so on a 2 x H200 host, 2026-11-30, and the whole figure was marked host-bound): it is
    not counted, and is run again, up to ``rounds`` times in all. ``ranks`` (timing.mpi_ranks' channel),
    where ``fn``'s launches meet across ranks: every rank runs the round again when one of them must,
    or the ranks' launches would no longer pair up. Where ``rounds`` rounds outlasted their spins before
    ``rounds`` others did not, and the host took as long to issue a round as the GPU to run it, the
    figure may be the host's: say so on stderr, and in HOST_BOUND (saved with the results). (A launch
    check that cost 2-3 us a tensor once made a chain of all-reduces time the host: docs/PERFORMANCE.md,
    issue 18.)"""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    lead = torch.cuda.Event(enable_timing=True)
    kept, late = [], []  # (gpu us, host us) a call, of the rounds counted and of those the host outlasted
    issue_us = _issue_us(fn, reps) if device_bound else 0.0
    while len(kept) < rounds and len(late) < rounds:
        t_lead = time.perf_counter()
        if device_bound:
            lead.record()
            torch.cuda._sleep(_cycles(2 * issue_us + 100))
            fn()  # not timed: several ranks' spins end apart, and their first launches wait for each other
        start.record()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        outlasted = device_bound and (t1 - t_lead) * 1e3 >= lead.elapsed_time(start)
        if ranks is not None and device_bound:
            outlasted = any(ranks.exchange("timing: a round outlasted its spin", outlasted, 120))
        (late if outlasted else kept).append((start.elapsed_time(end) * 1e3 / reps, (t1 - t0) * 1e6 / reps))
    counted = kept if len(kept) == rounds else kept + late
    gpu_us, host_us = statistics.median(g for g, _ in counted), statistics.median(h for _, h in counted)
    if counted is not kept and host_us >= 0.9 * gpu_us:
        what = getattr(fn, "__qualname__", type(fn).__name__)
        HOST_BOUND.append({"call": what, "host_us": host_us, "gpu_us": gpu_us, "rounds_outlasted": len(late)})
        print(
            f"timing: HOST-BOUND: issuing a call took {host_us:.1f} us on the host, the GPU {gpu_us:.1f} us, and "
            f"{len(late)} round(s) of {len(counted)} outlasted their spin: this figure is the host's, not the GPU's",
            file=sys.stderr,
            flush=True,
        )
    return gpu_us


def _issue_us(fn, reps: int) -> float:
    """How long the host takes to issue ``reps`` calls of ``fn`` (a round not counted), in microseconds."""
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    us = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    return us


_CYCLES_PER_US: list[float] = []


def _cycles(us: float) -> int:
    """GPU clock cycles of torch.cuda._sleep that last about ``us`` microseconds (at most 200 ms),
    measured once per process."""
    if not _CYCLES_PER_US:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # the spin kernel loaded and the clocks up before it is timed
        a.record()
        torch.cuda._sleep(10_000_000)
        b.record()
        b.synchronize()
        _CYCLES_PER_US.append(10_000_000 / max(a.elapsed_time(b) * 1e3, 1.0))
    return int(min(us, 200_000) * _CYCLES_PER_US[0])


def judged(verdict: str) -> str:
    """A bench's verdict on its goal, or why there is none: where a timing of this process was
    host-bound, the comparison it enters is the host's, neither a device target met nor one missed
    (bench_allreduce's chains were, on a 2 x H200 host on 2026-11-30, and printed "met")."""
    if not HOST_BOUND:
        return verdict
    return f"not judged: {len(HOST_BOUND)} timing(s) host-bound (host_bound in the JSON)"


def device_facts() -> dict:
    """The GPU, its driver, torch and the date, for a bench's results; every GPU bench asks first,
    so a machine without a GPU gets this message rather than one from deep inside torch."""
    if not torch.cuda.is_available():
        raise SystemExit(
            f"{Path(sys.argv[0]).name}: this benchmark times the GPU, and torch sees none (torch {torch.__version__}); "
            f"run it where torch.cuda.is_available()"
        )
    props = torch.cuda.get_device_properties(0)
    try:
        said = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=False
        ).stdout
        driver = said.strip().splitlines()[0]  # one line a GPU: every GPU of a host runs the same driver
    except (OSError, IndexError):
        driver = "unknown"
    return {
        "device": props.name,
        "sms": props.multi_processor_count,
        "driver": driver,
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
    }


def save(name: str, data: dict) -> None:
    """Write results to $OUT (device runs) or bench/results/ (elsewhere), with the host-bound
    measurements of this process under "host_bound" (empty when every figure is the GPU's)."""
    out = Path(os.environ.get("OUT") or Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({**data, "host_bound": HOST_BOUND}, indent=1))
