"""pytest-xdist: workers pinned to the visible GPUs round-robin before anything starts CUDA, scene
cases spread over the workers, and the backends of every worker's cases in the controller's summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cpu_helpers import cache_without_modules

from pytest_mpk import plugin


@pytest.mark.long_running
def test_two_workers(
    pytester: pytest.Pytester, scenes, monkeypatch: pytest.MonkeyPatch, mpk_cache_dir: Path, tmp_path: Path
) -> None:
    """One session of two workers (each costs a torch import), for what xdist changes:
    - each worker is pinned to its GPU before anything starts CUDA;
    - each torch pool gets half of the usable cores (at least one thread), and so do the processes a
      worker starts (test_cpu_share.py: an OMP_NUM_THREADS of the user's is kept);
    - scene cases spread over the workers; on a cold cache the first case of each worker that builds
      its cubin has the cubins of the session's cases built together, several to an nvcc run."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,7")  # what the workers are pinned to; the cases are emulated
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # this suite's own worker has set it
    threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
    ask = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]  # torch may cap it at the cores
    pool = subprocess.run(ask, env={**os.environ, "OMP_NUM_THREADS": threads}, capture_output=True, text=True, check=True)
    cold = cache_without_modules(tmp_path / "cold", mpk_cache_dir)
    monkeypatch.setenv("MPK_CACHE_DIR", str(cold))
    pytester.makepyfile(
        test_scene="""
            from pytest_mpk import Case, scene_test
            from scenes import NormScene

            @scene_test(layer="rmsnorm")
            class TestNorm(NormScene):
                CASES = [Case(name, batch=2, hidden=256 + 64 * n) for n, name in enumerate("abcdef")]
        """,
        test_pinning="""
            import os

            def test_pinned_before_the_tests_ran():
                worker = os.environ["PYTEST_XDIST_WORKER"]
                assert os.environ["CUDA_VISIBLE_DEVICES"] == {"gw0": "4", "gw1": "7"}[worker]
        """,
        test_threads=f"""
            import os
            import subprocess

            import pytest
            import torch

            @pytest.mark.parametrize("i", range(2))
            def test_threads(i):
                assert os.environ["OMP_NUM_THREADS"] == "{threads}"
                assert torch.get_num_threads() == {int(pool.stdout)}
                if i == 0:  # one child is enough: each starts a torch of its own, a second or so
                    child = subprocess.run({ask!r}, capture_output=True, text=True, check=True)
                    assert int(child.stdout) == {int(pool.stdout)}
        """,
    )
    result = pytester.runpytest_subprocess(
        "-p", "mpk", "-n", "2", "-v", "-rA", "--arch", "sm90", "--mpk-backend", "emulate", timeout=300
    )
    result.assert_outcomes(passed=9)
    result.stdout.fnmatch_lines(["*[[]gw0[]]*PASSED [[]emulated (CUDA bodies on the CPU)[]] test_scene.py::TestNorm::*"])
    result.stdout.fnmatch_lines(["*[[]gw1[]]*PASSED [[]emulated (CUDA bodies on the CPU)[]] test_scene.py::TestNorm::*"])
    result.stdout.fnmatch_lines(["*- mpk backends: 6 emulated (CUDA bodies on the CPU) -*"])
    result.stdout.fnmatch_lines(["*modules of the session's cases built together after the cache was found cold"])
    batched = [
        r for r in (cold / "modules").glob("rmsnorm_fp32_*-sm90-cubin-*/build.json") if "batch" in json.loads(r.read_text())
    ]
    assert len(batched) >= 2, sorted(p.parent.name for p in (cold / "modules").glob("*/build.json"))


@pytest.mark.parametrize(("visible", "workers"), [("0,1,2", 3), ("5", 1), ("", None), ("-1", None)])
def test_auto_workers_are_one_per_visible_gpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, visible: str, workers: int | None
) -> None:
    """``-n auto``: one worker per visible GPU; without GPUs, xdist's own default (None)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert plugin.pytest_xdist_auto_num_workers(pytester.parseconfig()) == workers


@pytest.mark.long_running
def test_auto_starts_one_worker_per_visible_gpu_end_to_end(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three visible GPUs on a machine of any CPU count: xdist starts three workers, pinned to 0, 1, 2
    (xdist's own answer, the CPU count, must not win)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    pytester.makepyfile(
        test_where="""
        import os

        import pytest

        @pytest.mark.parametrize("i", range(12))
        def test_where(i, worker_id):
            print("WHERE", worker_id, os.environ["CUDA_VISIBLE_DEVICES"])
    """
    )
    result = pytester.runpytest_subprocess("-p", "mpk", "-n", "auto", "-rA")
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(["created: 3/3 workers"])
    seen = {tuple(line.split()[1:]) for line in result.stdout.lines if line.startswith("WHERE ")}
    assert seen <= {("gw0", "0"), ("gw1", "1"), ("gw2", "2")} and {w for w, _ in seen} >= {"gw0"}, seen
