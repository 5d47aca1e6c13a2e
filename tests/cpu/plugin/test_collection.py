"""Collection of scene classes: one item per case and arch (``Class::case[arch]``) and one sweep
item per arch, the archs a session targets, markers on scene classes, and the per-case skips
(``Case(archs=...)``, ``manual=True``)."""

from __future__ import annotations

import gc
import json
import sys
import weakref

import pytest

TWO_CASES = """
import pytest
from hypothesis import strategies as st
from pytest_mpk import Case, scene_test
from scenes import NormScene

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256), Case("wide", batch=2, hidden=512)]
    SWEEP = {"batch": st.just(2), "hidden": st.just(256)}

@pytest.mark.mpk_slow
@scene_test(layer="rmsnorm")
class TestSlowNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256)]
"""


def test_one_item_per_case_and_arch(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=TWO_CASES)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "--arch", "sm80", "--arch", "sm100")
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::b2[sm80]",
            "test_scene.py::TestNorm::wide[sm80]",
            "test_scene.py::TestNorm::sweep[sm80]",
            "test_scene.py::TestNorm::b2[sm100]",
            "test_scene.py::TestNorm::wide[sm100]",
            "test_scene.py::TestNorm::sweep[sm100]",
            "test_scene.py::TestSlowNorm::b2[sm80]",
            "test_scene.py::TestSlowNorm::b2[sm100]",
            "8 tests collected*",
        ]
    )
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize(
    ("ini", "args", "archs"),
    [
        (None, [], ["sm90"]),  # auto: the local GPU's arch, sm90 without a GPU (as on this machine)
        (None, ["--arch", "auto", "--arch", "sm90"], ["sm90"]),  # the same arch twice: one item
        ("sm100", [], ["sm100"]),
        ("sm100", ["--arch", "sm80"], ["sm80"]),  # the command line wins over the ini file
    ],
    ids=["auto", "auto-and-sm90", "ini", "option-over-ini"],
)
def test_archs_of_the_session(pytester: pytest.Pytester, scenes, ini: str | None, args: list[str], archs: list[str]) -> None:
    pytester.makepyfile(test_scene=TWO_CASES)
    if ini:
        pytester.makeini(f"[pytest]\nmpk_arch = {ini}\n")
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-k", "TestNorm and b2", *args)
    n = len(archs)
    result.stdout.fnmatch_lines(
        [f"test_scene.py::TestNorm::b2[[]{a}[]]" for a in archs] + [f"{n}/{4 * n} tests collected ({3 * n} deselected)*"]
    )


def test_markers_of_a_scene_class_apply_to_its_cases(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=TWO_CASES)
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-m", "not mpk_slow")
    result.stdout.fnmatch_lines(["3/4 tests collected (1 deselected)*"])
    result.stdout.no_fnmatch_line("*TestSlowNorm*")


def test_each_arch_builds_and_runs_for_itself(pytester: pytest.Pytester, scenes) -> None:
    """``--arch`` repeated: each item compiles its graph for its own arch (the kept signature says
    which) and runs it."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
    """
    )
    result = pytester.runpytest_inprocess("-v", "--arch", "sm80", "--arch", "sm90", "--mpk-keep-artifacts")
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::b2[[]sm80[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            "test_scene.py::TestNorm::b2[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
        ]
    )
    result.assert_outcomes(passed=2)
    for arch in ("sm80", "sm90"):
        kept = pytester.path / ".mpk-artifacts" / f"test_scene.py_TestNorm_b2_{arch}"
        assert json.loads((kept / "signature_rank0.json").read_text())["arch"] == arch


def test_case_archs_skip_other_archs_with_the_reason(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("big", batch=2, hidden=256, archs=("sm80", "sm100"))]
    """
    )
    result = pytester.runpytest_inprocess("-rs", "--arch", "sm90")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_scene.py*: case 'big' runs on sm80, sm100, not sm90"])


def test_manual_case_runs_only_when_picked(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("big", batch=2, hidden=256, manual=True)]
    """
    )
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_scene.py*: manual case: run it with --mpk-case TestNorm::big"])

    result = pytester.runpytest_inprocess("-v", "--mpk-case", "TestNorm::big")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_scene.py::TestNorm::big[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*"])


@pytest.mark.parametrize(
    "args", [["--collect-only", "-q"], ["--mpk-backend", "emulate", "-k", "TestNorm and b2"]], ids=["collect", "run"]
)
def test_an_inner_run_leaves_nothing_of_its_session_behind(pytester: pytest.Pytester, scenes, args: list[str]) -> None:
    """A pytest run inside a process is over when it returns: the plugin keeps none of its objects.
    A cache of each scene class's line (its items' location) kept every class it saw, and so the
    class's module, the module's loader (pytest's rewriting hook), its config and the whole session:
    this suite's workers, which run many sessions through pytester, grew by hundreds of thousands of
    objects, and each full garbage collection walked them all. (pytester's own runs keep their
    session to the test's end, so this one runs pytest.main and drops the modules it imported.)"""
    pytester.makepyfile(test_scene=TWO_CASES)
    configs = []

    class KeepConfig:
        def pytest_configure(self, config: pytest.Config) -> None:
            configs.append(weakref.ref(config))

    before = set(sys.modules)
    try:
        assert pytest.main(["-p", "mpk", "--arch", "sm90", *args], plugins=[KeepConfig()]) == pytest.ExitCode.OK
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]
    gc.collect()
    assert len(configs) == 1 and configs[0]() is None
