"""The forked inner runs (forked_pytest) see what a subprocess would, and a run past its time is
stopped; a forked script exits as the interpreter would."""

from __future__ import annotations

import pytest
from forked_pytest import run_script_forked, runpytest_forked


def test_the_child_gets_the_test_s_environment_directory_and_path(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKED_PYTEST_PROBE", "set by the test")
    pytester.makepyfile(helper_module="VALUE = 42")
    pytester.makepyfile(
        test_probe=f"""
        import os, sys
        from pathlib import Path

        def test_probe():
            import helper_module  # the test's directory is on sys.path
            assert helper_module.VALUE == 42
            assert os.environ["FORKED_PYTEST_PROBE"] == "set by the test"
            assert Path.cwd() == Path({str(pytester.path)!r})
            assert sys.stdin.read() == ""
            print("said by the child")

        def test_fails():
            assert False, "a failure of the inner run"
        """
    )
    result = runpytest_forked(pytester, "-s", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*said by the child*", "*a failure of the inner run*"])


def test_a_run_past_its_time_is_stopped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_slow="import time\n\ndef test_slow():\n    time.sleep(60)\n")
    with pytest.raises(pytester.TimeoutExpired, match="ran past 2 s"):
        runpytest_forked(pytester, timeout=2)


@pytest.mark.parametrize(
    ("ending", "status", "said"),
    [("pass", 0, None), ("sys.exit(3)", 3, None), ("sys.exit('no model given')", 1, "no model given")],
)
def test_a_script_runs_as_main_with_its_arguments(pytester: pytest.Pytester, ending: str, status: int, said: str | None) -> None:
    pytester.makepyfile(helper_module="VALUE = 42")
    pytester.path.joinpath("script.py").write_text(
        "import sys\n"
        "import helper_module  # the test's directory is on sys.path\n"
        "print(__name__, sys.argv, helper_module.VALUE)\n"
        f"{ending}\n"
    )
    result = run_script_forked(pytester, "script.py", "--flag", "value")
    assert result.ret == status
    assert result.outlines == ["__main__ ['script.py', '--flag', 'value'] 42"]
    assert result.errlines == ([said] if said else [])


def test_the_child_finds_hypothesis_loaded_as_pytest_loads_it(pytester: pytest.Pytester) -> None:
    """The server ran pytest's start once (pytest_startup_preload): a run with our plugin finds
    Hypothesis imported by pytest's rewriting hook, as its own start would have left it, so pytest
    says nothing about modules it cannot rewrite; and the objects the server held are frozen out of
    the garbage collector."""
    pytester.makepyfile(
        test_probe="""
        import gc, sys
        from _pytest.assertion.rewrite import AssertionRewritingHook

        def test_probe():
            assert isinstance(sys.modules["hypothesis"].__loader__, AssertionRewritingHook)
            assert gc.get_freeze_count() > 100_000
        """
    )
    result = runpytest_forked(pytester, "-p", "mpk", "-n", "0", "-W", "error::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=1)
    assert "PytestAssertRewriteWarning" not in result.stdout.str() + result.stderr.str()
