"""Starting the ranks of a multi-rank GPU case from a plain pytest run: the item runs itself again
under ``mpirun -n N python -m pytest NODEID`` (every rank a process with its own GPU; ranks.py runs
the case there), and rank 0 of that job writes the case's outcome, gathered from every rank, to a
JSON file that this process reports.

The job runs in its own session, with a deadline; past it, every process of that session (mpirun
and the ranks it started) is killed, so none is left behind. Under pytest-xdist, one such job runs at
a time on the host (a file lock), with every GPU of the session visible to it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import devices

LAUNCH_TIMEOUT_S = 600.0  # the last resort: the ranks' own timeouts end a failing case much sooner
REPORT_ENV = "MPK_RANK_REPORT"  # where rank 0 of a job the plugin started writes the case's outcome


def mpirun() -> str | None:
    """The mpirun to start ranks with ($MPK_MPIRUN, else the one on PATH), or None."""
    return os.environ.get("MPK_MPIRUN") or shutil.which("mpirun")


def can_launch() -> str | None:
    """None when ranks can be started here, else why not."""
    import importlib.util

    if mpirun() is None:
        return "no mpirun on PATH (install Open MPI, or set MPK_MPIRUN)"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install mpi4py)"
    return None


def command(ranks: int, pytest_args: list[str]) -> list[str]:
    exe = mpirun()
    assert exe is not None
    cmd = [exe, "-n", str(ranks)]
    if _is_open_mpi(exe):
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["--bind-to", "none"]
    return cmd + [sys.executable, "-m", "pytest", *pytest_args]


def _is_open_mpi(exe: str) -> bool:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in out or "OpenRTE" in out


def run(ranks: int, pytest_args: list[str], cwd: Path, log: Path, timeout: float = LAUNCH_TIMEOUT_S) -> dict[str, Any]:
    """Run the job; its outcome: {"outcome": "passed" | "failed" | "skipped", "message": ..., "notes": [...]}."""
    from filelock import FileLock

    fd, report = tempfile.mkstemp(prefix="mpk-ranks-", suffix=".json")
    os.close(fd)
    os.unlink(report)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST") and k != "PYTEST_CURRENT_TEST"}
    env[REPORT_ENV] = report
    gpus = os.environ.get(devices.SESSION_GPUS_ENV)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = command(ranks, pytest_args)
    lock = FileLock(str(Path(tempfile.gettempdir()) / "mpk-ranks.lock"))
    start = time.monotonic()
    with lock, open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        if code is None or session_members(proc.pid):  # past the deadline, or a rank outlived mpirun
            kill_session(proc)
    try:
        result = json.loads(Path(report).read_text())
    except (OSError, ValueError):
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        why = f"ran past {timeout:g} s and was killed" if code is None else f"ended with exit code {code}"
        result = {
            "outcome": "failed",
            "message": f"the job of {ranks} ranks ({' '.join(cmd[:4])} ...) {why} without reporting the case; the end of its "
            f"output ({log}):\n{tail}",
            "notes": [],
        }
    finally:
        Path(report).unlink(missing_ok=True)
    result.setdefault("notes", []).append(f"{ranks} ranks under {cmd[0]} in {time.monotonic() - start:.1f} s (log: {log})")
    return result


def kill_session(proc: subprocess.Popen) -> None:
    """End mpirun and every process of its session (the ranks it started): SIGTERM, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        members = session_members(proc.pid)
        for pid in members:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and session_members(proc.pid):
            proc.poll()
            time.sleep(0.05)
        if not session_members(proc.pid):
            break
    proc.wait()


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (Linux /proc; elsewhere the leader alone)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return [sid]
    members = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the command: state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(d.name))
    return members


def write_report(outcome: str, message: str, notes: list[str]) -> None:
    """Rank 0 of a job the plugin started: leave the case's outcome where the plugin reads it."""
    path = os.environ.get(REPORT_ENV)
    if path:
        Path(path).write_text(json.dumps({"outcome": outcome, "message": message, "notes": notes}))
