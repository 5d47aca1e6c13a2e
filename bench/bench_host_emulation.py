"""What a task body costs in the host emulator (no GPU needed): one rmsnorm task (4 rows x 1024,
bf16) as one block of fibers, with and without race checking, for 128 (sm80) and 256 (sm90)
threads; one fiber switch; and the build times (cold cache, then the runner cached).

    python bench/bench_host_emulation.py    # writes bench/results/bench_host_emulation.json ($OUT if set)
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

ROWS, HIDDEN = 4, 1024


def per_task_us(module, desc, meta, batch, reps: int, rounds: int = 5) -> float:
    """The best over ``rounds`` of the mean time of ``reps`` runs, in microseconds (ctypes call included):
    the least disturbed round on a shared machine."""
    assert module.run_task(0, desc, meta, batch).ok
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            module.run_task(0, desc, meta, batch)
        samples.append((time.perf_counter() - t0) / reps * 1e6)
    return min(samples)


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> None:
    os.environ["MPK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mpk-bench-emu-")
    from mpk_runtime.build import host
    from mpk_runtime.codegen import abi, dispatcher
    from mpk_runtime.graph.variants import Variant
    from mpk_runtime.run import host_runner
    from mpk_runtime.tasks import registry

    x = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    w = torch.randn(HIDDEN, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    tokens = torch.tensor([ROWS], dtype=torch.int32)
    meta, batch = abi.MpkMeta(num_new_tokens=tokens.data_ptr()), abi.MpkBatchConfig(max_num_batched_tokens=1)
    desc = host_runner.task_desc(0, [x.data_ptr(), w.data_ptr()], [y.data_ptr()], [{"f": 1e-6}, {"i": ROWS}])
    variants = [Variant(0, registry.get("rmsnorm"), ["__nv_bfloat16", ROWS, HIDDEN])]

    rows = []
    for arch, threads in (("sm80", 128), ("sm90", 256)):
        source = dispatcher.generate(variants, arch)
        for race_check in (False, True):
            built = host.build_host_module(source, arch, "rmsnorm_bench", race_check)
            module = host_runner.HostModule(built.path)
            us = per_task_us(module, desc, meta, batch, reps=20 if race_check else 100)
            # Each of the 4 rows: 5 shuffles (warp_reduce) and 2 barriers (block_reduce) per thread.
            suspensions = ROWS * 7 * threads
            rows.append(
                {
                    "arch": arch,
                    "threads": threads,
                    "race_check": race_check,
                    "build_s": round(built.seconds, 2),
                    "us_per_task": round(us, 1),
                    "ns_per_suspension": round(us * 1e3 / suspensions, 1),
                }
            )
            print(json.dumps(rows[-1]))
    switch_ns = min(module.switch_ns(200_000) for _ in range(5))
    result = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "compiler": host.cxx_version(host.cxx()),
        "torch": torch.__version__,
        "task": f"rmsnorm bf16 {ROWS}x{HIDDEN}",
        "fiber_switch_ns": round(switch_ns, 1),
        "rows": rows,
    }
    print(json.dumps({"fiber_switch_ns": result["fiber_switch_ns"]}))
    out = Path(os.environ.get("OUT") or Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_host_emulation.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
