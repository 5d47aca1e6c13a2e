"""A GPU case that leaves the CUDA context unusable: later GPU cases of the process fail with the
reason instead of running, and an xdist worker ends itself so that xdist replaces it. Needs no GPU:
``devices.context_lost`` is what a faulted kernel would make true."""

from __future__ import annotations

import os
import types

import pytest

from pytest_mpk import devices
from pytest_mpk.session import SESSION_KEY

CASE = types.SimpleNamespace(nodeid="test_scene.py::TestNorm::b2[sm90]")
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


def test_an_xdist_worker_ends_itself(session, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def exit_(code: int):
        raise SystemExit(code)

    monkeypatch.setattr(session.config, "workerinput", {"workerid": "gw0"}, raising=False)
    monkeypatch.setattr(os, "_exit", exit_)
    with pytest.raises(SystemExit) as e:
        session.after_gpu_case(CASE, devices.GPU)
    assert e.value.code == 3
    assert f"mpk: the CUDA context is lost after {CASE.nodeid}; ending this worker" in capsys.readouterr().err
