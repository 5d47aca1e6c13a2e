"""The plugin's own mpirun jobs (launcher.py) with a fake mpirun: the command line, the outcome a
job's rank 0 reports, and a job past its deadline killed with every process it started."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from pytest_mpk import launcher

FAKE = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi
{body}
"""


def fake_mpirun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    path = tmp_path / "mpirun"
    path.write_text(FAKE.format(body=body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("MPK_MPIRUN", str(path))
    return path


def test_command_for_open_mpi(tmp_path, monkeypatch) -> None:
    exe = fake_mpirun(tmp_path, monkeypatch, "exit 0")
    cmd = launcher.command(2, ["t.py::T::c"])
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    assert cmd[:3] == [str(exe), "-n", "2"] and cmd[3:-4] == [*root, "--bind-to", "none"]
    assert cmd[-3:] == ["-m", "pytest", "t.py::T::c"]


def test_the_outcome_rank_0_reports(tmp_path, monkeypatch) -> None:
    fake_mpirun(
        tmp_path,
        monkeypatch,
        """echo '{"outcome": "failed", "message": "rank 1: boom", "notes": ["n"]}' > "$MPK_RANK_REPORT"; exit 1""",
    )
    result = launcher.run(2, ["x"], tmp_path, tmp_path / "job.log", timeout=60)
    assert result["outcome"] == "failed" and result["message"] == "rank 1: boom"
    assert result["notes"][0] == "n" and "2 ranks under" in result["notes"][1]


def test_a_job_without_a_report_fails_with_its_output(tmp_path, monkeypatch) -> None:
    fake_mpirun(tmp_path, monkeypatch, "echo the ranks crashed; exit 7")
    result = launcher.run(2, ["x"], tmp_path, tmp_path / "job.log", timeout=60)
    assert result["outcome"] == "failed"
    assert "ended with exit code 7 without reporting the case" in result["message"] and "the ranks crashed" in result["message"]


def test_a_job_past_its_deadline_is_killed_with_its_ranks(tmp_path, monkeypatch) -> None:
    pids = tmp_path / "pids"
    fake_mpirun(tmp_path, monkeypatch, f"sleep 300 & echo $! > {pids}; sleep 300 & wait")
    start = time.monotonic()
    result = launcher.run(2, ["x"], tmp_path, tmp_path / "job.log", timeout=2)
    assert time.monotonic() - start < 30
    assert "ran past 2 s and was killed" in result["message"]
    rank = int(pids.read_text())
    assert not Path(f"/proc/{rank}").exists() or Path(f"/proc/{rank}/stat").read_text().split(")")[1].split()[0] == "Z"
