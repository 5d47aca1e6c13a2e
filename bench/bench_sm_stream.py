"""One SM's streaming ceiling: bandwidth per SM from DRAM by warps loading and bytes each keeps in
flight, for one SM alone and for every SM at once (bench/sm_stream.cu, built here with nvcc for this
GPU). The task bodies stream with the worker's 8 warps; this says what those warps can reach, and
whether an SM's bytes in flight or the device's DRAM bound a layer.

    python bench/bench_sm_stream.py   # writes $OUT/bench_sm_stream.json
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from mpk_runtime import archs

sys.path.insert(0, str(Path(__file__).parent))
import cuda_program  # noqa: E402
import timing  # noqa: E402

SOURCE = Path(__file__).with_name("sm_stream.cu")


def build(arch: archs.Arch, where: Path) -> Path:
    """The program, built for `arch` (the project's gencode for it) into `where`."""
    return cuda_program.build(SOURCE, arch, where)


def parse(stdout: str) -> list[dict]:
    """The program's table (a header line, then one line a case) as dicts with numbers."""
    lines = [line for line in stdout.split("\n") if line.strip()]
    head = lines[0].split()
    rows = [dict(zip(head, line.split())) for line in lines[1:]]
    for r in rows:
        for key in ("blocks", "warps", "D"):
            r[key] = int(r[key])
        for key in ("in_flight_KB_per_block", "GBps_per_SM", "TBps_total"):
            r[key] = float(r[key])
    return rows


def table(rows: list[dict]) -> list[str]:
    """Markdown rows: each every-SM case beside the same case on one SM alone."""
    out = [
        "| mode | warps | D | KB in flight | one SM | all SMs, per SM | all SMs, total TB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    alone = {(r["mode"], r["warps"], r["D"]): r for r in rows if r["blocks"] == 1}
    for r in rows:
        if r["blocks"] == 1:
            continue
        one = alone.get((r["mode"], r["warps"], r["D"]))
        out.append(
            f"| {r['mode']} | {r['warps']} | {r['D']} | {r['in_flight_KB_per_block']:.0f} | "
            f"{one['GBps_per_SM'] if one else float('nan'):.1f} | {r['GBps_per_SM']:.1f} | {r['TBps_total']:.2f} |"
        )
    return out


def main() -> None:
    facts = timing.device_facts()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(archs.native_for(torch.cuda.get_device_capability(0)), Path(tmp))
        rows = parse(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    print(f"{facts['device']}, {facts['date']}: GB/s per SM (one SM alone, every SM at once) by warps and bytes in flight")
    print("\n".join(table(rows)))
    timing.save("bench_sm_stream", {**facts, "rows": rows})


if __name__ == "__main__":
    main()
