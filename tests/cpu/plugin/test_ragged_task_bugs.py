"""Bugs injected into a task of the user's own that reads the batch (ragged_task/: one task per request
slot, its rows from qo_indptr, declared as README says), run emulated through the plugin. Each passed
every case before the emulator checked for it: a task that writes into the next request's rows (its
slice is the whole dimension, so only the golden could see it, and only when it ran last), the page
table used as scratch, and shared memory past what the spec gives the task."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpu_helpers import fixed_copy, patched_copy
from own_task import run_scene

RAGGED_TASK = Path(__file__).resolve().parent / "ragged_task"
LOOP = "      out[at] = from_float<T>(v * static_cast<float>(i + 1) * inv_n);\n"


def body(old: str = "", new: str = "") -> Path:
    return patched_copy(RAGGED_TASK / "ragged.cuh", "mpk-ragged-task", old, new)


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, header: Path) -> pytest.RunResult:
    return run_scene(pytester, monkeypatch, RAGGED_TASK, "ragged_scene.py", "RAGGED_TASK_HEADER", header)


def test_the_correct_body_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, monkeypatch, body()).assert_outcomes(passed=4)


def test_a_write_into_the_next_request_s_first_row_fails_in_either_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slot x also writes the row after its last (while that row is another request's): the golden
    sees it only where slot x ran after slot x + 1; the overlap is seen whichever ran first."""
    wrong = LOOP + "      if (i == n - 1 && q0 + n < rt.num_active_tokens()) out[at + C] = from_float<T>(v);\n"
    result = run(pytester, monkeypatch, body(LOOP, wrong))
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        [
            "*write outside the task's part of an output in task *: output[[]*, 0[]] changed by task * "
            "(ragged_scale_0[[]*[]]), which task * "
            "(ragged_scale_0[[]*[]]) of the same layer changed earlier in this iteration: layer ragged_scale_0 picks "
            "its part of output at run time (a selected partition), *"
        ]
    )
    # Three cases share a module, but it keeps no state between launches: nothing blames earlier cases.
    assert "earlier cases in this process" not in result.stdout.str()


def test_the_page_table_used_as_scratch_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = "  if (threadIdx.x == 0) rt.meta.paged_kv_last_page_len[x] = -1;\n  float *red"
    result = run(pytester, monkeypatch, body("  float *red", scratch))
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        ["*write into a meta tensor in task *: paged_kv_last_page_len[[]*[]] holds -1 where prepare_next_batch left *"]
    )


def test_shared_memory_past_what_the_spec_gives_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec asks for one float a thread; the body reduces over 2 a thread."""
    result = run(
        pytester,
        monkeypatch,
        body("  red[threadIdx.x] = part;\n", "  red[threadIdx.x] = part;\n  red[threadIdx.x + kWorkerThreads] = 0.f;\n"),
    )
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["*dynamic shared memory overflow in task *: bytes 1024..2047 of dynamic shared memory *"])


def test_a_device_variable_never_reset_fails_at_the_second_launch(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each slot adds its sum of squares into a __device__ accumulator that nothing clears and writes
    what it holds: right at the module's first launch (the variable starts at zero), twice the value at
    the next, as in a real run's second launch or iteration. Three of the cases share a module (one
    shape), which the process loads once: the later two fail at their first launch, with the earlier
    launches named."""
    acc = "  if (threadIdx.x == 0) {\n    atomicAdd(&sumsq_acc[x], red[0]);\n    sumsq[0] = sumsq_acc[x];\n  }\n"
    text = (RAGGED_TASK / "ragged.cuh").read_text()
    text = text.replace("  if (threadIdx.x == 0) sumsq[0] = red[0];\n", acc)
    text = text.replace("namespace user {\n", "namespace user {\n__device__ float sumsq_acc[64];  // never reset\n")
    result = run(pytester, monkeypatch, fixed_copy("mpk-ragged-task", "ragged.cuh", text))
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        [
            "*second launch: the first launch of this case passed; the same kernel launched again on the same inputs "
            "(*) did not; the emulator also ran the workers in another order*",
            "*sumsq*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "module ragged_scale_bf16_200-host-sm90-* ran 2 launch(es) of earlier cases in this process, and its "
            "__device__ variables keep what they left: if this case passes alone (the repro line), a task keeps state "
            "between launches"
        ]
    )
