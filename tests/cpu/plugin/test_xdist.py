"""pytest-xdist: workers pinned to the visible GPUs round-robin before anything starts CUDA, scene
cases spread over the workers, and the backends of every worker's cases in the controller's summary."""

from __future__ import annotations

import pytest

from pytest_mpk import plugin


def test_scenes_in_two_workers(pytester: pytest.Pytester, scenes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,7")  # what the workers are pinned to; the cases are emulated
    pytester.makepyfile(
        test_scene="""
            from pytest_mpk import Case, scene_test
            from scenes import NormScene

            @scene_test(layer="rmsnorm")
            class TestNorm(NormScene):
                CASES = [Case(name, batch=2, hidden=256) for name in ("a", "b", "c", "d", "e", "f")]
        """,
        test_pinning="""
            import os

            def test_pinned_before_the_tests_ran():
                worker = os.environ["PYTEST_XDIST_WORKER"]
                assert os.environ["CUDA_VISIBLE_DEVICES"] == {"gw0": "4", "gw1": "7"}[worker]
        """,
    )
    result = pytester.runpytest_subprocess("-p", "mpk", "-n", "2", "-v", "--arch", "sm90", "--mpk-backend", "emulate",
                                           timeout=300)
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*[[]gw0[]]*PASSED [[]emulated+compiled[]] test_scene.py::TestNorm::*"])
    result.stdout.fnmatch_lines(["*[[]gw1[]]*PASSED [[]emulated+compiled[]] test_scene.py::TestNorm::*"])
    result.stdout.fnmatch_lines(["*- mpk backends: 6 emulated+compiled -*"])


@pytest.mark.parametrize(("visible", "workers"), [("0,1,2", 3), ("5", 1), ("", None), ("-1", None)])
def test_auto_workers_are_one_per_visible_gpu(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                              visible: str, workers: int | None) -> None:
    """``-n auto``: one worker per visible GPU; without GPUs, xdist's own default (None)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert plugin.pytest_xdist_auto_num_workers(pytester.parseconfig()) == workers
