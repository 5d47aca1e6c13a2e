"""Selecting scene cases: ``--mpk-case CLASS::CASE`` (validated: an unknown or malformed selector
is a usage error that suggests the right one), and pytest's own ``-k`` and ``--lf``, which work per
case because every case and arch is its own item."""

from __future__ import annotations

import glob

import pytest

SCENE = """
from pytest_mpk import Case, scene_test
from scenes import NormScene

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256), Case("b2_wide", batch=2, hidden=512), Case("b4", batch=4, hidden=256)]

@scene_test(layer="rmsnorm")
class TestOther(NormScene):
    CASES = [Case("b2", batch=2, hidden=256)]

def test_plain():
    pass
"""


@pytest.mark.parametrize(
    ("selectors", "selected"),
    [
        (["TestNorm::b2"], ["TestNorm::b2[[]sm80[]]", "TestNorm::b2[[]sm90[]]"]),
        (
            ["TestOther::b2", "TestNorm::b4"],
            ["TestNorm::b4[[]sm80[]]", "TestNorm::b4[[]sm90[]]", "TestOther::b2[[]sm80[]]", "TestOther::b2[[]sm90[]]"],
        ),
    ],
    ids=["one", "two"],
)
def test_mpk_case_keeps_only_those_cases_on_every_arch(
    pytester: pytest.Pytester, scenes, selectors: list[str], selected: list[str]
) -> None:
    pytester.makepyfile(test_scene=SCENE)
    args = [a for s in selectors for a in ("--mpk-case", s)]
    result = pytester.runpytest_inprocess("--collect-only", "-q", "--arch", "sm80", "--arch", "sm90", *args)
    n = len(selected)
    result.stdout.fnmatch_lines([f"test_scene.py::{s}" for s in selected] + [f"{n}/9 tests collected ({9 - n} deselected)*"])
    result.stdout.no_fnmatch_line("*test_plain*")


@pytest.mark.parametrize(
    ("selector", "hint"),
    [
        ("TestNorm::b3", "did you mean TestNorm::b4, TestNorm::b2*"),
        ("TestNorn::b2_wide", "did you mean TestNorm::b2_wide*"),
        ("Zzz::qqq", "collected cases: TestNorm::b2, TestNorm::b2_wide, TestNorm::b4, TestOther::b2"),
    ],
)
def test_unknown_case_is_a_usage_error_with_suggestions(pytester: pytest.Pytester, scenes, selector: str, hint: str) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--mpk-case", selector)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --mpk-case {selector}: no such scene case; {hint}"])


def test_unknown_case_without_scenes_says_none_were_collected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_inprocess("--mpk-case", "TestNorm::b2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --mpk-case TestNorm::b2: no such scene case; no scene cases were collected from the given paths"]
    )


@pytest.mark.parametrize("selector", ["TestNorm", "TestNorm::", "::b2", "TestNorm::b2[sm90]", "Test Norm::b2"])
def test_malformed_selector_is_a_usage_error(pytester: pytest.Pytester, selector: str) -> None:
    result = pytester.runpytest_inprocess("--mpk-case", selector)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*error: argument --mpk-case: expected CLASS::CASE (e.g. TestRMSNorm::b16), got " + glob.escape(repr(selector))]
    )


def test_keyword_selects_cases(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-k", "TestNorm and b2 and not wide")
    result.stdout.fnmatch_lines(["test_scene.py::TestNorm::b2[[]sm90[]]", "1/5 tests collected (4 deselected)*"])


GOOD_AND_BAD = """
from pytest_mpk import Case, scene_test
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("good", batch=2, hidden=256, off=0.0), Case("bad", batch=2, hidden=256, off=1.0),
             Case("also_good", batch=2, hidden=256, off=0.0)]

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight) + params["off"]
"""


def test_last_failed_reruns_only_the_failing_case(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=GOOD_AND_BAD)
    pytester.runpytest_inprocess().assert_outcomes(passed=2, failed=1)
    result = pytester.runpytest_inprocess("--lf", "-v")
    result.assert_outcomes(failed=1, deselected=2)
    result.stdout.fnmatch_lines(
        [
            "run-last-failure: rerun previous 1 failure*",
            "test_scene.py::TestNorm::bad[[]sm90[]] FAILED [[]emulated (CUDA bodies on the CPU)[]]*",
        ]
    )


def test_failed_first_runs_the_failing_case_first(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=GOOD_AND_BAD)
    pytester.runpytest_inprocess().assert_outcomes(passed=2, failed=1)
    result = pytester.runpytest_inprocess("--ff", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "run-last-failure: rerun previous 1 failure first*",
            "test_scene.py::TestNorm::bad[[]sm90[]] FAILED*",
            "test_scene.py::TestNorm::good[[]sm90[]] PASSED*",
            "test_scene.py::TestNorm::also_good[[]sm90[]] PASSED*",
        ]
    )


def test_stepwise_resumes_at_the_failing_case(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=GOOD_AND_BAD)
    pytester.runpytest_inprocess("--sw").assert_outcomes(passed=1, failed=1)
    result = pytester.runpytest_inprocess("--sw", "-v")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["stepwise: skipping 1 already passed items*", "test_scene.py::TestNorm::bad[[]sm90[]] FAILED*"])
