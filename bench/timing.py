"""Timing helpers shared by the benchmarks: CUDA events, warm-up, medians, device facts."""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
from pathlib import Path

import torch


def time_us(fn, reps: int = 100, warmup: int = 10, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean time of ``reps`` back-to-back calls, in microseconds."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(samples)


def device_facts() -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        driver = "unknown"
    return {
        "device": props.name,
        "sms": props.multi_processor_count,
        "driver": driver,
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
    }


def save(name: str, data: dict) -> None:
    """Write results to $OUT (device runs) or bench/results/ (elsewhere)."""
    out = Path(os.environ.get("OUT") or Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=1))
