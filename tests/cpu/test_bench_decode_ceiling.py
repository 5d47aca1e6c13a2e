"""bench/bench_decode_ceiling.py without a GPU: its CUDA program builds for sm90 with this machine's
nvcc (the tensor copies included; one build, 4-5 s of nvcc, kept in pytest's cache for later runs
under a key of its sources and the toolkit) and refuses a case it cannot run before it touches a GPU,
the bench says which case failed and why, and its rows become the table it prints."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cpu_helpers import bench_module
from filelock import FileLock

from mpk_runtime import archs
from mpk_runtime.build.host import cuda_version


@pytest.fixture(scope="module")
def bench():
    return bench_module("bench_decode_ceiling")


@pytest.fixture(scope="module")
def program(bench, request, tmp_path_factory):
    """The built program, from pytest's cache when its sources and the toolkit are the same (both
    xdist workers may ask at once: one builds, under a lock, and the other finds it). Without the
    cache (``-p no:cacheprovider``) it is built in this session's temporary directory."""
    here = Path(bench.SOURCE).parent  # the program and what it includes
    sources = [Path(bench.SOURCE), here / "ceiling_program.cuh", here / "cuda_check.h"]
    key = hashlib.sha256(cuda_version().encode() + b"".join(p.read_bytes() for p in sources))
    name = f"decode_ceiling-{key.hexdigest()[:16]}"
    cache = getattr(request.config, "cache", None)
    where = Path(cache.mkdir(name)) if cache is not None else tmp_path_factory.mktemp(name)
    exe = where / "decode_ceiling"
    with FileLock(str(where / "build.lock")):
        if not exe.is_file():
            (where / "partial").mkdir(exist_ok=True)
            built = bench.build(archs.by_name("sm90"), where / "partial")
            built.rename(exe)  # whole or not at all: a build that failed leaves no program behind
    assert exe.is_file() and exe.stat().st_size > 0
    return exe


@pytest.mark.parametrize(
    "args, message",
    [
        ([1, 8192, 16], "usage: decode_ceiling B S Z slots stages tile chain merge copies math_ns bulk lds producers"),
        # 8192 keys in 3 splits are not whole tiles of 128 keys
        (
            [1, 8192, 3, 1, 2, 128, 1, 1, 8, 0, 0, 0, 0],
            "decode_ceiling 1 8192 3 1 2 128 1 1 8 0 0 0 0 failed (2): decode_ceiling: ",
        ),
        # a split of 8192 keys has 128 pages, more than a slot keeps
        ([1, 8192, 1, 1, 2, 128, 1, 1, 8, 0, 0, 0, 0], "unsupported case B 1 S 8192 Z 1 slots 1 stages 2 tile 128 copies 8"),
        ([1, 8192, 16, 3, 2, 128, 1, 1, 8, 0, 0, 0, 0], "unsupported case B 1 S 8192 Z 16 slots 3"),
        ([1, 8192, 16, 1, 5, 128, 1, 1, 8, 0, 0, 0, 0], "unsupported case B 1 S 8192 Z 16 slots 1 stages 5"),
        ([1, 8192, 16, 1, 2, 128, 1, 1, 1, 0, 0, 0, 0], "copies 1"),
        # producer warps need the whole CTA as one slot, and cp.async copies
        ([1, 8192, 16, 2, 2, 64, 1, 1, 8, 0, 0, 0, 1], "slots 2 stages 2 tile 64 copies 8 producers 1 bulk 0"),
        ([1, 8192, 16, 1, 2, 128, 1, 1, 8, 0, 1, 0, 2], "producers 2 bulk 1"),
        ([1, 8192, 16, 1, 2, 128, 1, 1, 8, 0, 0, 0, 5], "producers 5"),
    ],
)
def test_a_case_it_cannot_run_fails_with_the_case_and_the_reason(bench, program, args, message):
    with pytest.raises(bench.CaseFailed) as failed:
        bench.run(program, args)
    assert message in str(failed.value)


def test_the_rows_become_a_table(bench):
    row = {"B": 1, "S": 8192, "Z": 16, "slots": 1, "stages": 2, "tile": 128, "chain": 1, "merge": 1, "math_ns": 700}
    row |= {"bulk": 0, "lds": 1, "producers": 0}
    figures = {"per_layer_us": 12.8, "pct_of_floor": 61.7, "span_us": 11.9, "span_pct_of_floor": 66.4}
    lines = bench.table([{**row, **figures, "side_by_side": 1}, {**row, "Z": 8, "producers": 2, **figures, "side_by_side": 2}])
    assert lines[2] == "| 1 × 8192 | 16 | 1 | 2 × 128 | cp.async | all | 1 | 1 | stage | 700 | 12.8 | 62% | 11.9 | 66% |"
    assert (
        lines[3]
        == "| 1 × 8192 | 8 | 1 | 2 × 128 | cp.async | 2 warps | 1 | 1 | stage | 700 | 12.8 (2 side by side) | 62% | 11.9 | 66% |"
    )
    assert len(lines) == 4


def test_a_failed_case_is_a_row_of_the_table(bench):
    row = {"B": 32, "S": 4096, "Z": 1, "slots": 1, "stages": 3, "tile": 128, "chain": 1, "merge": 1, "math_ns": 0}
    row |= {"bulk": 2, "lds": 1, "producers": 0, "error": "decode_ceiling 32 4096 ... failed (1): tensor copies differ"}
    (line,) = bench.table([row])[2:]
    assert line == (
        "| 32 × 4096 | 1 | 1 | 3 × 128 | tensor | all | 1 | 1 | stage | 0 | "
        "FAILED: decode_ceiling 32 4096 ... failed (1): tensor copies differ | | | |"
    )
