"""A GPU case that leaves the CUDA context unusable: later GPU cases of the process fail with the
reason instead of running, and an xdist worker ends itself so that xdist replaces it. Needs no GPU:
``devices.context_lost`` is what a faulted kernel would make true."""

from __future__ import annotations

import glob
import types

import pytest

from pytest_mpk import devices
from pytest_mpk.session import SESSION_KEY

CASE = types.SimpleNamespace(nodeid="test_scene.py::TestNorm::b2[sm90]", user_properties=[])
LATER = types.SimpleNamespace(nodeid="test_scene.py::TestNorm::b4[sm90]")


@pytest.fixture
def session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(devices, "context_lost", lambda: True)
    return pytester.parseconfigure().stash[SESSION_KEY]


def test_later_gpu_cases_fail_with_the_reason(session) -> None:
    session.guard_gpu(LATER, devices.GPU)  # nothing lost yet
    session.after_gpu_case(CASE, devices.GPU)
    with pytest.raises(pytest.fail.Exception) as e:
        session.guard_gpu(LATER, devices.GPU)
    assert str(e.value).startswith(f"not run: the CUDA context of this process was lost in {CASE.nodeid}; ")
    session.guard_gpu(LATER, devices.EMULATED)  # the emulator does not need CUDA


def test_only_gpu_cases_are_checked(session) -> None:
    session.after_gpu_case(CASE, devices.EMULATED)
    session.guard_gpu(LATER, devices.GPU)
    assert session.lost_context_in is None


def test_the_case_says_what_happens_next(session, monkeypatch: pytest.MonkeyPatch) -> None:
    case = types.SimpleNamespace(nodeid=CASE.nodeid, user_properties=[])
    assert session.after_gpu_case(case, devices.GPU).startswith(
        "the CUDA context of this process is lost: later GPU cases of this run fail without running; run with pytest-xdist (-n)"
    )
    assert ("mpk_context_lost", True) in case.user_properties
    monkeypatch.setattr(session.config, "workerinput", {"workerid": "gw0"}, raising=False)
    assert session.after_gpu_case(case, devices.GPU) == (
        "the CUDA context of this worker is lost: pytest-xdist replaces the worker, and its other cases run on the others"
    )


def test_xdist_crash_report_of_a_reported_case_is_silenced(session) -> None:
    """The worker's own failure report of the case arrives first; xdist's "crashed" report of the same
    case is then turned into a passed teardown report, which no summary counts."""
    failed = pytest.TestReport(
        CASE.nodeid,
        ("test_scene.py", None, ""),
        {},
        "failed",
        "illegal address",
        "call",
        user_properties=[("mpk_context_lost", True)],
    )
    session.pytest_runtest_logreport(failed)
    for nodeid, silenced in ((CASE.nodeid, True), (LATER.nodeid, False)):
        crash = pytest.TestReport(nodeid, ("test_scene.py", None, ""), {}, "failed", "crashed", "???")
        session.pytest_handlecrashitem(nodeid, crash, sched=None)
        assert (crash.outcome, crash.when, crash.longrepr) == (
            ("passed", "teardown", None) if silenced else ("failed", "???", "crashed")
        )


CONFTEST = """
import pytest

from pytest_mpk import devices
from pytest_mpk.session import SESSION_KEY


@pytest.fixture
def fault(request, monkeypatch):
    # What a GPU case's kernel fault does: the case fails, and the context is lost.
    def fault():
        monkeypatch.setattr(devices, "context_lost", lambda: True)
        request.config.stash[SESSION_KEY].after_gpu_case(request.node, devices.GPU)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    return fault
"""


@pytest.mark.long_running
def test_xdist_replaces_the_worker_and_runs_the_rest(pytester: pytest.Pytester) -> None:
    """End to end under pytest-xdist: the faulting case fails once, with its own error; its worker is
    replaced; every other case still runs and passes, whichever worker had it."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_cases="""
        import pytest

        @pytest.mark.parametrize("i", range(12))
        def test_case(i, fault):
            if i == 3:
                fault()
    """
    )
    result = pytester.runpytest_subprocess("-p", "mpk", "-n", "2", "-rf")
    result.assert_outcomes(passed=11, failed=1)
    failed = glob.escape("FAILED test_cases.py::test_case[3]") + " - RuntimeError: CUDA error: an illegal mem*"
    result.stdout.fnmatch_lines(["*replacing crashed worker gw*", failed])
    result.stdout.no_fnmatch_line("*crashed while running*")
    said = result.stdout.str() + result.stderr.str()  # the worker's stderr is the controller's
    assert "mpk: the CUDA context is lost after test_cases.py::test_case[3]; ending this worker" in said


def test_a_case_not_run_is_not_counted_as_a_gpu_run(pytester: pytest.Pytester, scenes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU case refused because the context was lost earlier says so, and neither its report nor
    the summary claims it ran on the GPU."""
    monkeypatch.setattr(devices, "backend_for", lambda arch, requested, local, check=False: devices.GPU)
    pytester.makeconftest("""
        from pytest_mpk.session import SESSION_KEY

        def pytest_sessionstart(session):
            session.config.stash[SESSION_KEY].lost_context_in = "test_scene.py::TestNorm::before[sm90]"
    """)
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
    """
    )
    result = pytester.runpytest_inprocess("-rf", "--arch", "sm90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([glob.escape("FAILED test_scene.py::TestNorm::b2[sm90]") + " - Failed: not run: the CUDA*"])
    result.stdout.no_fnmatch_line("*mpk backends*")
    result.stdout.no_fnmatch_line("*FAILED ?gpu?*")
