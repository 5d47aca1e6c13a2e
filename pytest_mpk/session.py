"""The plugin's state for one test session: options, archs, the local GPU, selected cases,
backend counts for the summary, and what to do when a GPU case kills the CUDA context."""

from __future__ import annotations

import os
import shlex
import sys
from collections import Counter
from pathlib import Path

import pytest

from . import devices

SESSION_KEY = pytest.StashKey["MpkSession"]()
BACKEND_PROPERTY = "mpk_backend"  # user property of every item that ran a kernel: which backend did


class MpkSession:
    def __init__(self, config: pytest.Config):
        self.config = config
        opt = config.option
        self.requested_archs: list[str] = opt.mpk_arch or [config.getini("mpk_arch") or "auto"]
        self.backend: str = opt.mpk_backend or config.getini("mpk_backend") or "auto"
        self.selected_cases: list[str] = opt.mpk_case or []
        artifacts = opt.mpk_artifacts_dir or config.getini("mpk_artifacts_dir") or ".mpk-artifacts"
        self.artifacts_dir = Path(config.rootpath, artifacts) if not os.path.isabs(artifacts) else Path(artifacts)
        self.keep_artifacts: bool = opt.mpk_keep_artifacts
        self.hang_timeout: float = opt.mpk_hang_timeout or float(config.getini("mpk_hang_timeout") or 5.0)
        self.replay: Path | None = Path(opt.mpk_replay).resolve() if opt.mpk_replay else None
        self.profile: bool = opt.mpk_profile
        self.backends: Counter[str] = Counter()
        self._archs: list[str] | None = None
        self._local: tuple[str | None] | None = None
        self.lost_context_in: str | None = None
        self.session: pytest.Session | None = None

    @property
    def archs(self) -> list[str]:
        if self._archs is None:
            self._archs = devices.resolve_archs(self.requested_archs)
        return self._archs

    def local_arch(self) -> str | None:
        if self._local is None:
            self._local = (devices.local_arch() if self.backend in ("auto", "gpu") else None,)
        return self._local[0]

    def repro(self, item: pytest.Item) -> str:
        """One command line that reruns ``item`` with this session's mpk options."""
        arch = getattr(item, "arch", None)
        parts = ["pytest", item.nodeid, "-p", "mpk"]
        if arch:
            parts += ["--arch", arch]
        parts += ["--mpk-backend", self.backend]
        if getattr(getattr(item, "case", None), "manual", False):  # skipped unless picked
            parts += ["--mpk-case", item.selector]
        if self.replay:
            parts += ["--mpk-replay", str(self.replay)]
        opt = self.config.option
        if opt.mpk_hang_timeout:
            parts += ["--mpk-hang-timeout", str(opt.mpk_hang_timeout)]
        if opt.mpk_artifacts_dir:
            parts += ["--mpk-artifacts-dir", str(self.artifacts_dir)]
        return " ".join(shlex.quote(p) for p in parts)

    # -- hooks (this object is registered as a plugin) ------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        backend = dict(report.user_properties).get(BACKEND_PROPERTY)
        if backend is not None and report.when == "call":
            self.backends[backend] += 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.backends:
            parts = ", ".join(f"{n} {b}" for b, n in sorted(self.backends.items()))
            terminalreporter.write_sep("-", f"mpk backends: {parts}")

    # -- a case that kills the CUDA context ------------------------------------------------------
    def guard_gpu(self, item: pytest.Item, backend: str) -> None:
        if backend == devices.GPU and self.lost_context_in is not None:
            pytest.fail(
                f"not run: the CUDA context of this process was lost in {self.lost_context_in}; with pytest-xdist "
                f"(-n) that worker is replaced and this case runs elsewhere", pytrace=False)

    def after_gpu_case(self, item: pytest.Item, backend: str) -> None:
        """After a GPU case: if it left the CUDA context unusable (an illegal address in a task
        body...), end this xdist worker so that xdist reports the case and starts a fresh worker for
        the rest; without xdist, fail later GPU cases with the reason instead of running them."""
        if backend != devices.GPU or not devices.context_lost():
            return
        self.lost_context_in = item.nodeid
        if hasattr(self.config, "workerinput"):
            sys.stderr.write(f"\nmpk: the CUDA context is lost after {item.nodeid}; ending this worker so that "
                             f"pytest-xdist replaces it\n")
            sys.stderr.flush()
            os._exit(3)
