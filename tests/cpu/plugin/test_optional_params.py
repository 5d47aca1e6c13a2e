"""Optional case parameters: a case may leave out a parameter that the class gives a default in
DEFAULTS (filled in before generate_args, in cases and sweeps alike), or that generate_args reads
with params.get(...). A key that looks like a misspelling of another is still refused."""

from __future__ import annotations

import json
import textwrap

import pytest

RECORDING = """
import json
import torch
from hypothesis import strategies as st
from pytest_mpk import Case, Out, scene_test
from scenes import ProbeScene

@scene_test(layer="probe")
class TestProbe(ProbeScene):
{body}

    def compute_golden(self, args, params):
        with open("params.jsonl", "a") as f:
            f.write(json.dumps(params, sort_keys=True) + "\\n")
        return super().compute_golden(args, params)
"""


def run(pytester: pytest.Pytester, body: str, *args: str) -> list[dict]:
    pytester.makepyfile(test_scene=RECORDING.format(body=textwrap.indent(textwrap.dedent(body), "    ")))
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=result.parseoutcomes().get("passed", 0))
    assert result.ret == 0, result.stdout.str()
    return [json.loads(line) for line in (pytester.path / "params.jsonl").read_text().splitlines()]


def test_a_key_only_some_cases_give_is_optional(pytester: pytest.Pytester, scenes) -> None:
    """The issue's example: Case("fp16", ..., dtype=...) beside cases without dtype, read with .get."""
    seen = run(
        pytester,
        """
        CASES = [Case("plain", batch=2), Case("high", batch=2, lo=500)]

        def generate_args(self, params):
            x = torch.randint(params.get("lo", 1), 1000, (params["batch"], 4), dtype=torch.int32)
            return {"x": x, "y": Out(torch.empty_like(x))}
        """,
    )
    assert seen == [{"batch": 2}, {"batch": 2, "lo": 500}]


def test_defaults_fill_in_what_a_case_leaves_out(pytester: pytest.Pytester, scenes) -> None:
    seen = run(
        pytester,
        """
        DEFAULTS = {"lo": 1}
        CASES = [Case("plain", batch=2), Case("high", batch=2, lo=500)]

        def generate_args(self, params):
            x = torch.randint(params["lo"], 1000, (params["batch"], 4), dtype=torch.int32)
            return {"x": x, "y": Out(torch.empty_like(x))}
        """,
    )
    assert seen == [{"batch": 2, "lo": 1}, {"batch": 2, "lo": 500}]


def test_defaults_fill_in_what_a_sweep_does_not_draw(pytester: pytest.Pytester, scenes) -> None:
    seen = run(
        pytester,
        """
        PARAMS = ("batch", "lo")
        DEFAULTS = {"lo": 7}
        SWEEP = {"batch": st.integers(1, 3)}

        def generate_args(self, params):
            x = torch.randint(params["lo"], 1000, (params["batch"], 4), dtype=torch.int32)
            return {"x": x, "y": Out(torch.empty_like(x))}
        """,
    )
    assert seen and all(p["lo"] == 7 for p in seen)


@pytest.mark.parametrize(
    ("cases", "message"),
    [
        ('[Case("b2", batch=2, lo=5), Case("typo", batch=2, loo=5)]', "Case 'typo' has an unknown key 'loo'; did you mean 'lo'?"),
        (
            '[Case("b2", batch=2), Case("typo", batch=2, bacth=3)]',
            "Case 'typo' has an unknown key 'bacth'; did you mean 'batch'?",
        ),
    ],
    ids=["optional_key", "required_key"],
)
def test_a_key_that_looks_like_another_is_refused(pytester: pytest.Pytester, scenes, cases: str, message: str) -> None:
    pytester.makepyfile(
        test_scene=f"""
        from pytest_mpk import Case, scene_test
        from scenes import ProbeScene

        @scene_test(layer="probe")
        class TestProbe(ProbeScene):
            DEFAULTS = {{"batch": 2}}
            CASES = {cases}
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*TestProbe: {message}"])


UNREAD = """
import torch
from pytest_mpk import Case, Out, scene_test
from scenes import ProbeScene

@scene_test(layer="probe")
class TestProbe(ProbeScene):
    CASES = [Case("plain", batch=2), Case("high", batch=2, {key}=500)]

    def generate_args(self, params):
        {read}
        return {{"x": x, "y": Out(torch.empty_like(x))}}
"""


@pytest.mark.parametrize(
    ("key", "read", "said"),
    [
        (
            "low",
            'x = torch.randint(params.get("lo", 1), 1000, (params["batch"], 4), dtype=torch.int32)',
            "did you mean 'lo'? The scene asked for 'lo', which no case or DEFAULTS gives; ",
        ),
        ("upper", 'x = torch.randint(1, 1000, (params["batch"], 4), dtype=torch.int32)', ""),
    ],
    ids=["a misspelling of a params.get name", "read nowhere"],
)
def test_a_key_the_scene_never_reads_fails_its_case(pytester: pytest.Pytester, scenes, key: str, read: str, said: str) -> None:
    """Like no other key, so not refused at collection; but the scene never reads it, so the case
    would pass with what it names at its default."""
    pytester.makepyfile(test_scene=UNREAD.format(key=key, read=read))
    result = pytester.runpytest_inprocess("-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*SceneError: Case 'high' gives '{key}', which the scene never read (generate_args, kernel_params, build and "
            f"compute_golden have run), so it has no effect; {said}name each as the scene reads it, or leave it out of the case"
        ]
    )


def test_every_key_read_at_once_counts_as_read(pytester: pytest.Pytester, scenes) -> None:
    """``**params`` (or iterating, or json.dumps) reads every key."""
    read = "x = (lambda batch, lo=1, **_: torch.randint(lo, 1000, (batch, 4), dtype=torch.int32))(**params)"
    pytester.makepyfile(test_scene=UNREAD.format(key="lo", read=read))
    pytester.runpytest_inprocess().assert_outcomes(passed=2)
