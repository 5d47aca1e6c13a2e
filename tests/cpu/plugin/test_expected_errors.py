"""Case(raises=regex): the case passes only when the kernel fails with a KernelError whose message
matches; a kernel that runs to the end fails the case, and so does another error."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mpk import Case

EMBED = (Path(__file__).resolve().parents[2] / "scenes" / "embed" / "test_embed.py").read_text()


def test_a_kernel_that_does_not_fail_fails_the_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_scene=EMBED
        + """

@scene_test(layer="embed")
class TestValidIds(TestEmbed):
    CASES = [Case("valid", batch=5, vocab=50, hidden=100, tasks=4, bad_token=49, raises="outside the vocabulary")]
"""
    )
    result = pytester.runpytest_inprocess("--mpk-case", "TestValidIds::valid", "--arch", "sm90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["the kernel ran to the end, but the case expects it to fail with an error matching 'outside the vocabulary'"]
    )


def test_another_error_than_the_expected_one_fails_the_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_scene=EMBED
        + """

@scene_test(layer="embed")
class TestOtherError(TestEmbed):
    CASES = [Case("other", batch=5, vocab=50, hidden=100, tasks=4, bad_token=50, raises="a hang")]
"""
    )
    result = pytester.runpytest_inprocess("--mpk-case", "TestOtherError::other", "--arch", "sm90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*token id 50 is outside the vocabulary [[]0, 50)*"])


def test_raises_must_be_a_regular_expression() -> None:
    with pytest.raises(ValueError, match=r"Case 'c': raises='\(' must be a regular expression"):
        Case("c", batch=1, raises="(")
