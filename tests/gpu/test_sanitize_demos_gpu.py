"""--mpk-sanitize on the device: each tool finds the bug of its demonstration scene
(sanitize_demo_scenes.py, bodies in sanitize_demos.cuh) and fails the case with it, mapped to the
source line. Opt-in (MPK_SANITIZE_DEMOS=1): each case runs under compute-sanitizer, and the bugs
are deliberate; they are never part of the default suite."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not os.environ.get("MPK_SANITIZE_DEMOS"), reason="deliberately buggy tasks under compute-sanitizer: MPK_SANITIZE_DEMOS=1"
)

HERE = Path(__file__).resolve().parent
DEMOS = {  # tool -> (scene class, a line of its finding)
    "memcheck": ("TestOutOfBounds", "Invalid __global__ write of size 4 bytes"),
    "racecheck": ("TestRacy", "*Race reported between*"),
    "synccheck": ("TestDivergentSync", "*Barrier error detected*"),
    "initcheck": ("TestUninitialized", "Uninitialized __global__ memory read of size 4 bytes"),
}


@pytest.mark.parametrize("tool", list(DEMOS))
def test_the_sanitizer_reports_the_demo_bug(tool: str, tmp_path: Path) -> None:
    cls, finding = DEMOS[tool]
    cmd = [
        sys.executable, "-m", "pytest", str(HERE / "sanitize_demo_scenes.py"), "-p", "no:cacheprovider", "-q",
        "-n", "0", "--mpk-sanitize", tool, "--mpk-case", f"{cls}::b4", "--mpk-artifacts-dir", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=HERE.parents[1], capture_output=True, text=True, timeout=580, check=False)
    out = proc.stdout + proc.stderr
    for raw in tmp_path.rglob("compute-sanitizer-*.log"):  # the tool's own words, should its format change
        out += f"\n--- {raw.name} (first 60 lines):\n" + "\n".join(raw.read_text().splitlines()[:60])
    lines = out.splitlines()
    assert proc.returncode == 1, out
    assert any(line.startswith(f"compute-sanitizer {tool}: ") for line in lines), out
    assert any(fnmatch.fnmatch(line, finding) for line in lines), out
    assert any(fnmatch.fnmatch(line, "  at *sanitize_demos.cuh:*") for line in lines), out
