"""Imported once by forked_pytest's fork server: what every inner pytest run imports at its start,
imported the way such a run imports it, so that the forked runs find it done.

An inner run with our plugin imports Hypothesis (the plugin's sweep profiles), and pytest's assertion
rewriter rewrites every module of a distribution that provides a pytest plugin, Hypothesis' 75 among
them: 1.3 s of the 2 s such a run spends in pytest on the 2-core machine, every run, because this
environment writes no byte code (``PYTHONDONTWRITEBYTECODE``), rewritten or not. Importing Hypothesis
plainly in the server would not do: pytest then warns in each run that it "cannot rewrite" it, and
the runs would see that warning. So the server runs one pytest session of its own that collects
nothing and imports Hypothesis from ``pytest_configure``: pytest's own import hook rewrites it, as it
does in a run, and a later run finds the modules loaded by that hook and says nothing. The session
loads the plugins installed (xdist, Hypothesis') but not ours (``-p no:mpk``), which each run imports
afresh under its test's environment; it reads no project's settings, conftest or PYTEST_ADDOPTS.

Last, what the server holds by then (torch's objects above all) is frozen out of the garbage
collector (``gc.freeze``), as fork servers do: pytest collects garbage twice at the end of every run,
and in a child of this server each collection walked torch's objects again, 0.13 s each.
"""

from __future__ import annotations

import contextlib
import gc
import io
import tempfile
from pathlib import Path

import pytest


class _ImportHypothesis:
    """Imports Hypothesis while pytest's rewriting hook is installed and the plugins are marked."""

    def pytest_configure(self) -> None:
        import hypothesis  # noqa: F401


def _collect_nothing() -> None:
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory(prefix="pytest-preload-") as folder:
        for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
            mp.delenv(name, raising=False)
        ini = Path(folder) / "pytest.ini"  # the rootdir, its settings empty
        ini.write_text("[pytest]\n")
        args = ["-c", str(ini), "--noconftest", "-p", "no:mpk", "-p", "no:cacheprovider", "-s", "-q", "--collect-only"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = pytest.main([*args, folder], plugins=[_ImportHypothesis()])
    # An empty folder collects nothing (exit code 5); anything else means the session did not run.
    if code != pytest.ExitCode.NO_TESTS_COLLECTED:
        raise RuntimeError(f"the fork server's pytest session ended with {code!r}, not NO_TESTS_COLLECTED")


_collect_nothing()
gc.freeze()
