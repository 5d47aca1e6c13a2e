"""The scene whose kept artifacts the replay tests replay (shared by test_replay and test_replay_faults)."""

from __future__ import annotations

from pathlib import Path

import pytest

SCENE = """
from pytest_mpk import Case, scene_test
from scenes import NormScene

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256), Case("wide", batch=2, hidden=512)]
"""
FILES = ["signature_rank0.json", "task_graph_rank0.json", "test_rank0.cu"]


def kept_case(pytester: pytest.Pytester) -> Path:
    """Run TestNorm::b2 keeping its artifacts; its compile output directory."""
    pytester.makepyfile(test_scene=SCENE)
    pytester.runpytest_inprocess("--mpk-case", "TestNorm::b2", "--mpk-keep-artifacts").assert_outcomes(passed=1)
    kept = pytester.path / ".mpk-artifacts" / "test_scene.py_TestNorm_b2_sm90"
    assert sorted(p.name for p in kept.iterdir()) == FILES
    return kept
