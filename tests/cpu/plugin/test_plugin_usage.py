"""The plugin's options as a newcomer meets them: an artifacts directory on a file system that takes
none is a usage error; a passing case leaves no artifacts (one that fails as its ``raises=`` expects,
or is compiled only, included); --mpk-profile says which cases it did not profile; and a scene file
run as a script (``run_module``) ends without pytest's warnings about modules it imported first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_mpk.scene import _imported_before_pytest

EMBED = (Path(__file__).resolve().parents[2] / "scenes" / "embed" / "test_embed.py").read_text()
NORM = """
from pytest_mpk import Case, SceneTestCase, scene_test
from hypothesis import strategies as st
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("good", batch=2, hidden=256)]

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight)

if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
"""


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a /proc file system")
def test_an_artifacts_directory_on_a_file_system_that_takes_none(pytester: pytest.Pytester, scenes) -> None:
    """/proc grants write access but makes no directory: refused before any case runs, not by a
    passing case failing with pathlib's errors."""
    pytester.makepyfile(test_scene=NORM)
    result = pytester.runpytest_inprocess("--mpk-artifacts-dir", "/proc/x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --mpk-artifacts-dir /proc/x: cannot make a directory in /proc (No such file or directory); "
            "choose a directory you can write"
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_the_check_leaves_nothing_behind(pytester: pytest.Pytester) -> None:
    """The directory is tried, not made: a run of plain tests (the plugin loads for every run) leaves
    neither it nor the directory it was tried with."""
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.runpytest_inprocess("--mpk-artifacts-dir", "kept/here").assert_outcomes(passed=1)
    assert sorted(p.name for p in pytester.path.iterdir() if p.name not in ("__pycache__", ".pytest_cache")) == ["test_plain.py"]


@pytest.mark.parametrize("backend", ["auto", "compile-only"])
def test_a_case_that_fails_as_it_expects_leaves_no_artifacts(pytester: pytest.Pytester, backend: str) -> None:
    pytester.makepyfile(test_scene=EMBED)
    result = pytester.runpytest_inprocess("-k", "id_vocab or id_last", "--mpk-backend", backend, "--mpk-artifacts-dir", "a")
    result.assert_outcomes(passed=2)
    assert list(pytester.path.joinpath("a").iterdir()) == []


def test_profile_says_which_cases_it_did_not_profile(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=NORM)
    result = pytester.runpytest_inprocess("--mpk-profile")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*",
            "mpk: --mpk-profile records cases on the GPU backend only: 1 case(s) that ran emulated or compiled were not profiled",
        ]
    )
    assert not any(pytester.path.glob(".mpk-artifacts/*"))  # nothing profiled: nothing kept
    pytester.runpytest_inprocess().stdout.no_fnmatch_line("*--mpk-profile*")


@pytest.mark.long_running
def test_a_scene_run_as_a_script_ends_without_warnings(pytester: pytest.Pytester, scenes) -> None:
    """The script imported Hypothesis (and this package) before pytest started; pytest, which
    rewrites its plugins' modules, would warn that it cannot rewrite them."""
    pytester.makepyfile(test_scene=NORM)
    result = pytester.run(sys.executable, "test_scene.py", timeout=300)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*1 passed in *"])
    result.stdout.no_fnmatch_line("*warnings summary*")


def test_only_the_modules_of_hypothesis_and_this_package_are_let_off() -> None:
    """Another plugin's module imported before pytest starts (pytest-xdist's, here) is still warned
    about: its asserts would not be rewritten."""
    import _hypothesis_globals  # noqa: F401  (imported with Hypothesis, like a scene file's SWEEP)
    import xdist  # noqa: F401

    modules = [f.split("; ")[1].split(":")[0] for f in _imported_before_pytest()]
    assert {"hypothesis", "_hypothesis_globals", "pytest_mpk"} <= set(modules)
    assert "xdist" not in modules
