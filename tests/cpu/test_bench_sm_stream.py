"""bench/bench_sm_stream.py without a GPU: its CUDA program builds for sm80 and sm90 with this
machine's nvcc, and the program's output becomes the rows and the table the bench prints."""

from __future__ import annotations

import pytest
from cpu_helpers import bench_module

from mpk_runtime import archs


@pytest.fixture(scope="module")
def bench():
    return bench_module("bench_sm_stream")


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_the_program_builds(bench, tmp_path, arch):
    exe = bench.build(archs.by_name(arch), tmp_path)
    assert exe.is_file() and exe.stat().st_size > 0


OUTPUT = """mode blocks warps D in_flight_KB_per_block GBps_per_SM TBps_total
cp.async 1 8 4 32.0 74.5 0.075
cp.async 132 8 4 32.0 33.2 4.390
ld 132 2 1 1.0 2.6 0.340
"""


def test_the_output_becomes_rows_and_a_table(bench):
    rows = bench.parse(OUTPUT)
    assert rows[1] == {
        "mode": "cp.async",
        "blocks": 132,
        "warps": 8,
        "D": 4,
        "in_flight_KB_per_block": 32.0,
        "GBps_per_SM": 33.2,
        "TBps_total": 4.39,
    }
    lines = bench.table(rows)
    assert lines[2] == "| cp.async | 8 | 4 | 32 | 74.5 | 33.2 | 4.39 |"  # beside the one-SM case
    assert lines[3] == "| ld | 2 | 1 | 1 | nan | 2.6 | 0.34 |"  # no one-SM case: said so, not invented
    assert len(lines) == 4
