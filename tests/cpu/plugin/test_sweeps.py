"""SWEEP: one Hypothesis item per arch that draws params from the strategies, runs each draw as a
case, and on failure shrinks to the minimal failing params, which the failure shows; and the
plugin's Hypothesis profiles (few examples: each one compiles a kernel).

ProbeScene's build does not depend on the batch, so every example reuses one cached module.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import settings

from pytest_mpk import profiles

SWEEP = """
from hypothesis import strategies as st
from pytest_mpk import Case, scene_test
from scenes import ProbeScene

@scene_test(layer="probe")
class TestProbe(ProbeScene):
    SWEEP = {{"batch": st.integers(1, 8)}}

    def compute_golden(self, args, params):
        expected = super().compute_golden(args, params)
        return expected + ({wrong} if params["batch"] >= 3 else 0)
"""


def test_sweep_passes_when_every_example_does(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SWEEP.format(wrong=0))
    result = pytester.runpytest_inprocess("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestProbe::sweep[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            "*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*",
        ]
    )


def test_failing_sweep_shrinks_to_the_minimal_params(pytester: pytest.Pytester, scenes) -> None:
    """The golden is wrong only from batch 3 on: the failure is reported for batch=3, whatever
    batch Hypothesis first failed with, and its artifacts and repro line are those of that example.
    The check reads the params our report prints, never Hypothesis' wording."""
    pytester.makepyfile(test_scene=SWEEP.format(wrong=1))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ TestProbe::sweep[[]sm90[]] _*",
            "output 'y' (int32, shape (3, 4)) differs from the golden (rtol=0, atol=0): 12 of 12 elements (100%)",
            "params: {'batch': 3}",
            "backend: emulated (CUDA bodies on the CPU) (sm90)",
            "artifacts: */.mpk-artifacts/test_scene.py_TestProbe_sweep_sm90 (*",
            "repro: pytest 'test_scene.py::TestProbe::sweep[[]sm90[]]' -p mpk --arch sm90 --mpk-backend auto",
        ]
    )
    inputs = torch.load(pytester.path / ".mpk-artifacts" / "test_scene.py_TestProbe_sweep_sm90" / "inputs.pt")
    assert inputs["x"].shape == (3, 4)


def test_sweep_items_sit_beside_the_cases(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene="""
        from hypothesis import strategies as st
        from pytest_mpk import Case, scene_test
        from scenes import ProbeScene

        @scene_test(layer="probe")
        class TestProbe(ProbeScene):
            CASES = [Case("b2", batch=2)]
            SWEEP = {"batch": st.sampled_from([1, 2])}
    """
    )
    result = pytester.runpytest_inprocess("-v", "--arch", "sm90", "--arch", "sm80", "-k", "sm90")
    result.assert_outcomes(passed=2, deselected=2)
    result.stdout.fnmatch_lines(
        ["test_scene.py::TestProbe::b2[[]sm90[]] PASSED*", "test_scene.py::TestProbe::sweep[[]sm90[]] PASSED*"]
    )


def test_plugin_profiles() -> None:
    """dev, ci and thorough exist once the plugin is loaded (as it is here); none has a deadline."""
    ci = settings.get_profile("ci")
    assert (ci.max_examples, ci.derandomize, ci.database, ci.deadline) == (10, True, None, None)
    assert settings.get_profile("dev").deadline is None
    assert settings.get_profile("thorough").max_examples == 200


def test_a_conftest_profile_of_the_same_name_wins(pytester: pytest.Pytester) -> None:
    """The plugin registers its profiles before conftest files run; Hypothesis' own ci it replaces."""
    pytester.makeconftest("""
        from hypothesis import settings

        settings.register_profile("dev", max_examples=3)
    """)
    pytester.makepyfile(
        test_profiles="""
        from hypothesis import settings

        def test_profiles():
            assert settings.get_profile("dev").max_examples == 3
            assert settings.get_profile("ci").max_examples == 10
    """
    )
    try:
        pytester.runpytest_inprocess().assert_outcomes(passed=1)
    finally:
        profiles.register()  # profiles are global to the process: the plugin's again


RECORDING = """
import json
from hypothesis import strategies as st
from pytest_mpk import scene_test
from scenes import ProbeScene

@scene_test(layer="probe")
class TestProbe(ProbeScene):
    SWEEP = {"batch": st.integers(1, 4), "salt": st.integers(0, 10**9)}  # salt: examples that share a module

    def compute_golden(self, args, params):
        with open("examples.jsonl", "a") as f:
            f.write(json.dumps(params) + "\\n")
        return super().compute_golden(args, params)
"""


def _examples(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "examples.jsonl"
    lines = path.read_text().splitlines()
    path.unlink()
    return [json.loads(line) for line in lines]


def test_quick_sweep_runs_the_same_few_examples_every_run(pytester: pytest.Pytester, scenes) -> None:
    """By default a sweep is derandomized: a second run draws the same examples, so it finds
    their modules in the cache instead of building new shapes."""
    pytester.makepyfile(test_scene=RECORDING)
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    first = _examples(pytester)
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert _examples(pytester) == first
    assert len(first) == profiles.QUICK_SWEEP["max_examples"]


def test_quick_sweep_draws_the_same_examples_from_another_rootdir(pytester: pytest.Pytester, scenes) -> None:
    """The examples do not depend on where pytest starts (the node id moves with the rootdir), so a
    run outside the checkout, as CI runs the installed wheel, finds the checkout's modules."""
    pytester.mkdir("suite")
    pytester.makepyfile(**{"suite/test_scene": RECORDING})
    (pytester.path / "suite" / "scenes.py").write_text((pytester.path / "scenes.py").read_text())
    pytester.runpytest_inprocess("suite").assert_outcomes(passed=1)
    first = _examples(pytester)
    pytester.runpytest_inprocess("suite", "--rootdir", str(pytester.path / "suite")).assert_outcomes(passed=1)
    assert _examples(pytester) == first


def test_sweep_examples_option_gives_the_long_sweep(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=RECORDING)
    pytester.runpytest_inprocess("--mpk-sweep-examples", "12").assert_outcomes(passed=1)
    assert len(_examples(pytester)) == 12


def test_a_profile_on_the_command_line_gives_the_long_sweep(pytester: pytest.Pytester, scenes) -> None:
    loaded = settings._current_profile  # the inner run loads its profile for the whole process
    pytester.makeconftest("""
        from hypothesis import settings

        settings.register_profile("long", max_examples=9)
    """)
    pytester.makepyfile(test_scene=RECORDING)
    try:
        pytester.runpytest_inprocess("--hypothesis-profile", "long").assert_outcomes(passed=1)
    finally:
        settings.load_profile(loaded or "default")
    assert len(_examples(pytester)) == 9


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_sweep_examples_must_be_a_positive_count(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest_inprocess("--mpk-sweep-examples", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument --mpk-sweep-examples: expected a positive number of examples, got '{value}'"])
