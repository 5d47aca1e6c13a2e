"""The bench's own CUDA programs (the ceilings and the streaming probe under bench/): built with nvcc
for one arch, run one case at a time, their figures read from the `key value` pairs they print."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mpk_runtime import archs
from mpk_runtime.build.nvcc import nvcc

CSRC = Path(__file__).parents[1] / "csrc"  # a program may use the runtime's primitives (cp.async, TMA)


class CaseFailed(Exception):
    """One case of a program failed: the case and the program's message."""


def build(source: Path, arch: archs.Arch, where: Path) -> Path:
    """The program `source`, built for `arch` (the project's gencode for it) into `where`."""
    exe = where / source.stem
    command = [nvcc(), "-O3", "-std=c++17", f"-I{CSRC}", f"-gencode={arch.gencode}", "-o", str(exe), str(source)]
    subprocess.run(command, check=True)
    return exe


def figures(exe: Path, args: list[int]) -> dict[str, float]:
    """The figures the program prints for one case (its arguments), as `key value` pairs on one line."""
    done = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    if done.returncode:
        case = " ".join(map(str, [exe.name, *args]))
        raise CaseFailed(f"{case} failed ({done.returncode}): {done.stderr.strip()}")
    line = done.stdout.split()
    return {key: float(value) for key, value in zip(line[::2], line[1::2])}
