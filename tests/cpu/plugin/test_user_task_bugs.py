"""Bugs injected into a task of the user's own (user_task/: a row softmax declared as README says),
run emulated through the plugin. Each had passed every case of its scene: NaN alone as the stale
shared-memory poison vanished in fmaxf, bf16's absolute tolerance was larger than every value of a
wide softmax, and every case interleaved the workers in one order."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpu_helpers import patched_copy
from own_task import run_scene

USER_TASK = Path(__file__).resolve().parent / "user_task"
CORRECT = "yr[c] = from_float<T>(__expf(row[c] - m) * inv);\n"


def body(old: str = "", new: str = "") -> Path:
    return patched_copy(USER_TASK / "softmax.cuh", "mpk-user-task", old, new)


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, header: Path) -> pytest.RunResult:
    return run_scene(pytester, monkeypatch, USER_TASK, "row_softmax_scene.py", "USER_TASK_HEADER", header)


def test_the_correct_body_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, monkeypatch, body()).assert_outcomes(passed=5)


def test_a_missing_barrier_before_a_max_reduction_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(pytester, monkeypatch, body("    __syncthreads();  // the row staged before", "    // the row staged before"))
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*NaN in the output: * computed by the kernel*"])


def test_an_all_zero_wide_softmax_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(pytester, monkeypatch, body(CORRECT, "yr[c] = from_float<T>(0.f);\n"))
    result.assert_outcomes(failed=5)
    result.stdout.fnmatch_lines(
        ["*(bfloat16, shape (2, 32768)) differs from the golden (rtol=0.016, atol=*; atol: the default 0.01 scaled*"]
    )


def test_a_write_into_the_next_task_s_first_row_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Task 0 also writes the first element of task 1's slice: the golden misses it whenever task 1
    runs after it; the emulator's look at what each task changed does not."""
    wrong = CORRECT + "    if (task.grid_idx[0] == 0 && r == ROWS - 1 && threadIdx.x == 0) yr[COLS] = from_float<T>(1.f);\n"
    result = run(pytester, monkeypatch, body(CORRECT, wrong))
    result.assert_outcomes(failed=5)
    result.stdout.fnmatch_lines(
        [
            "*write outside the task's part of an output in task 0: output[[]1, 0[]] changed by task 0 (row_softmax_0[[]0[]]), "
            "outside its output slice output[[]0:1, 0:1024[]], which is task 1's (row_softmax_0[[]1[]]) *"
        ]
    )
