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
