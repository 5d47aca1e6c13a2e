"""A task of the user's own whose spec declares less than its body reads (stencil_task/: a row
stencil reading the rows above and below its own, between two rmsnorm layers, the second in place).
Declared split like its output, its input carries no dependency on the tasks that write those halo
rows, nor on the in-place rmsnorm tasks that overwrite them later. --mpk-emulate-check names the read.
The default emulated run sees it where the order of the tasks exposes it: the emulator runs each task
as early as its declared dependencies allow (run/emulated_order.py), which fails all 7 cases; the
deepest ready task first alone failed 5, a random order of the workers 3."""

from __future__ import annotations

from pathlib import Path

import pytest
from own_task import run_variant

STENCIL_TASK = Path(__file__).resolve().parent / "stencil_task"


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, declared: str, *args: str) -> pytest.RunResult:
    return run_variant(pytester, monkeypatch, STENCIL_TASK, ("STENCIL_INPUT", declared), *args)


def test_the_input_declared_whole_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, monkeypatch, "whole").assert_outcomes(passed=7)


def test_a_halo_read_without_its_dependency_fails_every_case(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(pytester, monkeypatch, "split")
    result.assert_outcomes(failed=7)
    result.stdout.fnmatch_lines(["*output 'smoothed' (bfloat16, shape (*)) differs from the golden*"])


def test_the_checked_run_names_the_halo_read_in_every_case(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(pytester, monkeypatch, "split", "--mpk-emulate-check")
    result.assert_outcomes(failed=7)
    result.stdout.fnmatch_lines(
        ["*read outside the task's slices in task *: thread * reads 2 bytes at x_norm[[]*[]]*stencil.cuh:*"]
    )
