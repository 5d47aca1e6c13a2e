"""A task of the user's own that stages its rows in scratch memory (scratch_task/). Staged in rows of
its own in its layer's workspace, it passes; staged in one row that every task of the layer shares
(of the workspace, or of a __device__ array), it is a race on the GPU (the tasks of a layer can run
at once) that the emulator's results never show, since it runs one task at a time: the emulator
reports the second task that stores into the row. The count that every task adds to the
workspace's first word with an atomic is shared by design, and not reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from own_task import run_variant

SCRATCH_TASK = Path(__file__).resolve().parent / "scratch_task"


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, stage: str, *args: str) -> pytest.RunResult:
    return run_variant(pytester, monkeypatch, SCRATCH_TASK, ("SCRATCH_STAGE", stage), *args)


def test_rows_of_its_own_pass(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, monkeypatch, "own").assert_outcomes(passed=3)


def test_a_row_every_task_shares_fails_where_two_tasks_use_it(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(pytester, monkeypatch, "shared")
    result.assert_outcomes(failed=2, passed=1)  # r4_t1: one task, nothing shared
    result.stdout.fnmatch_lines(
        [
            "*scratch shared by plain stores in task *: rotate_rows*.stage[[]4[]] (* element(s) in all) changed with "
            "plain stores by task * and by task * of the same layer in this iteration*",
            "*Give each task its own part (indexed by its grid index; *",
        ]
    )
    result.stdout.no_fnmatch_line("*stage[[][0-3][]]*")  # the atomic count


def test_a_device_array_every_task_shares_fails_where_two_tasks_use_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, "device")
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*scratch shared by plain stores in task *: __device__ variable user::g_stage, byte * (* byte(s) in all) "
            "changed with plain stores by task * and by task * of the same layer in this iteration*"
        ]
    )
