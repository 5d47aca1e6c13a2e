"""``pytester.runpytest_subprocess`` (and ``pytester.run(python, script)``) without paying for torch's
import in every inner run.

An inner run that needs a process of its own (a task registry of its own, say) used to start a new
interpreter, whose ``import torch`` took 1.5-1.8 s of the 2 to 5 s such a test takes on the 2-core
machine. Here the inner pytest runs in a child forked by multiprocessing's fork server, which has
imported torch once and run pytest's start once (pytest_startup_preload: Hypothesis, rewritten), and
nothing of ours: the child imports the runtime and the plugin afresh, under the test's environment.
The child gets what a subprocess would: the test's environment and working directory, that directory
first on ``sys.path`` (pytester puts it on PYTHONPATH), no stdin, and its stdout and stderr in files,
read back into the ``RunResult``. A script (``run_script_forked``) runs as ``__main__`` with its
arguments in ``sys.argv``. The child leaves through ``os._exit`` after the run, as multiprocessing's
children do: a test of what happens at interpreter exit needs a real process.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import runpy
import sys
import tempfile
import time
from pathlib import Path

import pytest

# Fresh processes that do not each import torch: these inner runs, and the build race in test_build.py.
# torch.distributed.tensor too: torch.testing.assert_close imports it at its first call (0.6 s on the
# 2-core machine, in every inner run that compares an output). pytest_startup_preload: what a pytest
# run imports at its start (its module says why). A module missing from a torch build is skipped.
SERVER_PRELOAD = ["torch", "torch.distributed.tensor", "pytest_startup_preload"]


def torch_forkserver() -> multiprocessing.context.ForkServerContext:
    """multiprocessing's fork-server context, its server started (once a process) with SERVER_PRELOAD
    imported. The server imports them by name from the path it starts with, which is not ours
    (Python 3.11's server ignores the path multiprocessing hands it), so it starts with this folder,
    where pytest_startup_preload is, on its PYTHONPATH."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(SERVER_PRELOAD)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(Path(__file__).resolve().parent), prepend=os.pathsep)
        multiprocessing.forkserver.ensure_running()
    return context


def _child(args: list[str], cwd: str, env: dict[str, str], out: str, err: str, script: str | None) -> None:
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path.insert(0, cwd)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    # A SystemExit leaves the child as it leaves the interpreter (multiprocessing maps its code the
    # same way: None 0, an int itself, anything else printed and 1), and the streams are flushed.
    if script is None:
        sys.exit(int(pytest.main(args)))
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


def _run_forked(pytester: pytest.Pytester, args: list[str], script: str | None, timeout: float) -> pytest.RunResult:
    base = Path(tempfile.mkdtemp(prefix="runpytest-", dir=pytester.path))
    out, err = base.with_suffix(".out"), base.with_suffix(".err")
    if script is None:
        args = [f"--basetemp={base}", *args]
    what = f"inner pytest {args}" if script is None else f"script {script} {args}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
    start = time.time()
    child = torch_forkserver().Process(target=_child, args=(args, os.getcwd(), env, str(out), str(err), script))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        raise pytester.TimeoutExpired(f"{what} ran past {timeout} s")
    lines = [Path(path).read_text(errors="replace").splitlines() for path in (out, err)]
    return pytest.RunResult(child.exitcode, lines[0], lines[1], time.time() - start)


def runpytest_forked(pytester: pytest.Pytester, *args: str, timeout: float = 600) -> pytest.RunResult:
    """What ``pytester.runpytest_subprocess(*args)`` returns, from a forked child (see the module)."""
    return _run_forked(pytester, list(args), None, timeout)


def run_script_forked(pytester: pytest.Pytester, script: str, *args: str, timeout: float = 600) -> pytest.RunResult:
    """What ``pytester.run(sys.executable, script, *args)`` returns, from a forked child (see the module)."""
    return _run_forked(pytester, list(args), script, timeout)
