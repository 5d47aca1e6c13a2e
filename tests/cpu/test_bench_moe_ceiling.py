"""bench/bench_moe_ceiling.py without a GPU: its CUDA program builds for sm80 and sm90 with this
machine's nvcc (the TMA copies included on sm90), refuses a case it cannot run before it touches a
GPU, and its rows, a failed case among them, become the table it prints."""

from __future__ import annotations

import pytest
from cpu_helpers import bench_module

from mpk_runtime import archs


@pytest.fixture(scope="module")
def bench():
    return bench_module("bench_moe_ceiling")


@pytest.fixture(scope="module")
def program(bench, tmp_path_factory):
    """The program built for sm90, its TMA copies included (the cases below run it without a GPU)."""
    return bench.build(archs.by_name("sm90"), tmp_path_factory.mktemp("moe_ceiling"))


def test_the_program_builds_for_sm80_and_sm90(bench, program, tmp_path):
    sm80 = bench.build(archs.by_name("sm80"), tmp_path)  # its TMA paths compile to traps there
    assert all(exe.is_file() and exe.stat().st_size > 0 for exe in (sm80, program))


@pytest.mark.parametrize(
    "args, message",
    [
        ([10, 6, 32], "usage: moe_ceiling " + "blocks stages stage_kb layout sync router combine copy"),
        ([10, 5, 32, 0, 0, 1, 1, 0], "unsupported case blocks 10 stages 5 stage_kb 32"),  # no 5-stage kernel
        ([10, 4, 48, 0, 0, 1, 1, 0], "stage_kb 48"),  # a stage is 16, 32 or 64 KB: a segment holds whole stages
        ([10, 4, 16, 0, 0, 1, 1, 1], "stage_kb 16 layout 0 sync 0 router 1 combine 1 copy 1"),  # TMA stages are 32 KB
        ([10, 4, 32, 2, 0, 1, 1, 0], "layout 2"),
        ([10, 4, 32, 0, 0, 1, 2, 0], "combine 2"),
        ([2, 4, 32, 0, 0, 1, 1, 0], "blocks 2"),  # T(blocks) - T(2) needs more than 2
        ([10, 8, 32, 0, 0, 1, 1, 0], "stages 8 stage_kb 32"),  # 256 KB of stages do not fit an SM
    ],
)
def test_a_case_it_cannot_run_fails_with_the_case_and_the_reason(bench, program, args, message):
    with pytest.raises(bench.cuda_program.CaseFailed) as failed:
        bench.cuda_program.figures(program, args)
    assert message in str(failed.value)
    assert str(failed.value).startswith(f"moe_ceiling {' '.join(map(str, args))} failed (2): ")


def test_the_rows_become_a_table(bench):
    case = dict(zip(bench.ARGS.split()[1:], (6, 32, 1, 1, 1, 0, 1)))
    figures = {"per_block_us": 26.0, "pct_of_floor": 68.4, "route_us": 1.7, "stream_us": 19.02, "partial_us": 0.9}
    figures |= {"wait_us": 1.15, "combine_us": 1.44}
    failed = {**case, "copy": 0, "error": "moe_ceiling 10 6 32 ... failed (1): out of memory"}
    lines = bench.table([{**case, **figures}, failed])
    assert lines[2] == "| 6 × 32 | TMA | (I, H) | 1 | 1 | atomics, fp32 | 26.0 | 68% | 1.70 | 19.02 | 0.90 | 1.15 | 1.44 |"
    assert lines[3] == (
        "| 6 × 32 | cp.async | (I, H) | 1 | 1 | atomics, fp32 | FAILED: moe_ceiling 10 6 32 ... failed (1): out of memory "
        "| | | | | | |"
    )
    assert len(lines) == 4
    assert lines[0].count("|") == lines[2].count("|") == lines[3].count("|")
