"""Goldens of layers that read the meta tensors: ``args.meta`` holds the meta tensors as
prepare_next_batch left them, and ``Expected(value, written=...)`` says which elements a run must
leave as they were (rows of inactive tokens, say), without a custom ``compare``."""

from __future__ import annotations

import pytest

# rmsnorm over a batch of max_num_batched_tokens=8 rows while the iteration has 3 active tokens
# (one request with a prompt of 3): rows 3..7 must not be written.
ACTIVE_ROWS = """
import torch
from pytest_mpk import Case, Expected, scene_test
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestActiveRows(NormScene):
    CASES = [Case("b8_active3", batch=8, hidden=256)]

    def kernel_params(self, params):
        return {{"max_num_batched_tokens": 8, "max_seq_length": 8, "max_num_pages": 8,
                 "meta_tensors": {{"prompt_lengths": torch.tensor([3], dtype=torch.int32)}}}}

    def compute_golden(self, args, params):
        active = int(args.meta.num_new_tokens[0])
        assert active == 3 and args.meta.qo_indptr_buffer.tolist() == [0, 3]
        written = torch.arange(params['batch']) < {limit}
        return Expected(rmsnorm(args.input, args.weight), written=written)
"""


def test_meta_in_the_golden_and_rows_that_must_stay_unwritten(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=ACTIVE_ROWS.format(limit="active"))
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_a_written_row_the_golden_marks_unwritten_fails_with_where(pytester: pytest.Pytester, scenes) -> None:
    """The golden claims only row 0 is written; the kernel writes rows 0..2: rows 1 and 2 changed."""
    pytester.makepyfile(test_scene=ACTIVE_ROWS.format(limit="1"))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*output 'output': 512 elements that no task should write were changed (first at (1, 0), (1, 1)*"]
    )


def test_a_bad_written_mask_names_the_output(pytester: pytest.Pytester, scenes) -> None:
    scene = ACTIVE_ROWS.format(limit="active").replace("torch.arange(params['batch']) < active", "torch.ones(3) > 0")
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Expected(written=...) has shape (3,); it must be the output's shape (8, 256) or a prefix*"])


# A scene that keeps its history tensor for every case: the run advances the kernel's step.
KEPT_OVERRIDE = """
import torch
from pytest_mpk import Case, Expected, scene_test
from scenes import NormScene, rmsnorm

STEP = torch.tensor([4], dtype=torch.int32)  # 4 of the prompt's 10 tokens cached: 6 new ones

@scene_test(layer="rmsnorm")
class TestKeptStep(NormScene):
    CASES = [Case("first", batch=8, hidden=256), Case("second", batch=8, hidden=256)]

    def kernel_params(self, params):
        return {"max_num_batched_tokens": 8, "max_seq_length": 16, "max_num_pages": 16,
                "meta_tensors": {"prompt_lengths": torch.tensor([10], dtype=torch.int32), "step": STEP}}

    def compute_golden(self, args, params):
        assert STEP.tolist() == [4], STEP
        active = int(args.meta.num_new_tokens[0])
        assert active == 6, active
        return Expected(rmsnorm(args.input, args.weight), written=torch.arange(params["batch"]) < active)
"""


def test_a_meta_tensor_the_scene_keeps_is_not_changed_by_the_run(pytester: pytest.Pytester, scenes) -> None:
    """The kernel gets a copy of each override: its run advances step and appends to tokens, which had
    changed the scene's own tensor, so that the next case ran one decode token instead of six."""
    pytester.makepyfile(test_scene=KEPT_OVERRIDE)
    pytester.runpytest_inprocess().assert_outcomes(passed=2)


def test_kernel_params_must_return_the_same_every_time(pytester: pytest.Pytester, scenes) -> None:
    """An unseeded page order differs between the harness's call and first_batch_meta's: the history
    written at the predicted pages would not be where the kernel reads it."""
    scene = KEPT_OVERRIDE.replace(
        '"step": STEP}}',
        '"step": STEP, "paged_kv_indices_buffer": torch.randperm(16, dtype=torch.int32)}}',
    )
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*TestKeptStep.kernel_params returned [[]*] (torch.int32, shape (16,)) for [[]'meta_tensors'[]][[]"
            "'paged_kv_indices_buffer'[]] once and [[]*] (torch.int32, shape (16,)) the next time, for the same params; "
            "*draw random values from a seeded generator*"
        ]
    )


def test_a_meta_device_override_is_a_scene_error(pytester: pytest.Pytester, scenes) -> None:
    scene = KEPT_OVERRIDE.replace('"step": STEP}}', '"step": torch.zeros(1, dtype=torch.int32, device="meta")}}')
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*TestKeptStep.kernel_params: meta_tensors[[]'step'[]] is a tensor on the meta device, which holds no data*"]
    )


def test_requests_the_one_iteration_had_no_room_for_are_noted(pytester: pytest.Pytester, scenes) -> None:
    """Two prompts of 3 tokens, one slot: the second never runs, and the report says so."""
    scene = ACTIVE_ROWS.format(limit="active").replace("torch.tensor([3], dtype", "torch.tensor([3, 3], dtype")
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess("-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test mode ran 1 of 2 requests in its one iteration; request(s) [[]1[]] did not fit "
            "(max_num_batched_requests=1, max_num_batched_tokens=8, max_num_pages=8) and were not run*"
        ]
    )


def test_a_row_off_is_named_by_its_request_and_position(pytester: pytest.Pytester, scenes) -> None:
    """A layer's token rows are the iteration's new tokens: the report says whose token a row is.
    Request 0 has 4 cached tokens and 3 new ones (rows 0-2: positions 4-6)."""
    scene = (
        ACTIVE_ROWS.format(limit="active")
        .replace(
            "torch.tensor([3], dtype=torch.int32)}",
            "torch.tensor([7], dtype=torch.int32), 'step': torch.tensor([4], dtype=torch.int32)}",
        )
        .replace(
            "return Expected(rmsnorm(args.input, args.weight), written=written)",
            "value = rmsnorm(args.input, args.weight)\n        value[1, 3] += 1\n        return Expected(value, written=written)",
        )
    )
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "  the first element off, (1, 3): its output slice: task 1 (*) writes output[[]1:2, 0:256[]]; row 1 is "
            "request 0's token at position 5 (its new token 1 of 3)"
        ]
    )


def test_rows_of_a_dim_that_is_not_the_token_batch_get_no_request(pytester: pytest.Pytester, scenes) -> None:
    """8 rows where max_num_batched_tokens is 4: not a token batch, so every row is computed, and a
    row off is not called past the iteration's tokens."""
    scene = (
        ACTIVE_ROWS.format(limit="8")
        .replace('"max_num_batched_tokens": 8', '"max_num_batched_tokens": 4')
        .replace("assert active == 3 and args.meta.qo_indptr_buffer.tolist() == [0, 3]", "")
        .replace(
            "return Expected(rmsnorm(args.input, args.weight), written=written)",
            "value = rmsnorm(args.input, args.weight)\n        value[6, 3] += 1\n        return Expected(value, written=written)",
        )
    )
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["  the first element off, (6, 3): its output slice: task 6 (*) writes output[[]6:7, 0:256[]]"])
    result.stdout.no_fnmatch_line("*row 6 is*")
