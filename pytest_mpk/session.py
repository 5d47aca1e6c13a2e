"""The plugin's state for one test session: options, archs, the local GPU, selected cases,
backend counts for the summary, and what to do when a GPU case kills the CUDA context."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from . import cpu_share, devices, sanitize

SESSION_KEY = pytest.StashKey["MpkSession"]()
BACKEND_PROPERTY = "mpk_backend"  # user property of every item that ran a kernel: which backend did
CONTEXT_LOST_PROPERTY = "mpk_context_lost"  # user property of a GPU case after which the CUDA context was lost


def ini(config: pytest.Config, name: str):
    """An ini value, parsed and checked as its command-line option is (a pytest usage error otherwise)."""
    from .plugin import INI_OPTIONS

    option, parse = INI_OPTIONS[name]
    text = config.getini(name)
    try:
        return parse(text)
    except argparse.ArgumentTypeError as e:
        raise pytest.UsageError(f"ini option {name} = {text!r}: {e} (as {option})") from None


def check_writable_dir(path: Path, where: str) -> None:
    """A usage error when ``path`` can be neither made nor written: a file in its way, no permission, or
    a file system that takes no directories (/proc). Tried by making, then removing, a directory of a
    unique name in the nearest existing one: ``path`` itself is made only by a case that keeps files."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise pytest.UsageError(f"{where} {path}: {existing} is a file, not a directory; choose another directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".mpk-probe-", dir=existing))
    except OSError as e:
        raise pytest.UsageError(
            f"{where} {path}: cannot make a directory in {existing} ({e.strerror}); choose a directory you can write"
        ) from None


def check_backend(backend: str, where: str) -> None:
    """A usage error when the GPU backend is asked for and no GPU is visible (known without starting CUDA)."""
    if backend == "gpu" and not devices.visible_gpus():
        raise pytest.UsageError(
            f"{where}: no GPU is visible (CUDA_VISIBLE_DEVICES / nvidia-smi); use --mpk-backend auto or emulate to run "
            f"the cases on the CPU emulator"
        )


class MpkSession:
    def __init__(self, config: pytest.Config):
        self.config = config
        opt = config.option
        self.requested_archs: list[str] = opt.mpk_arch or [ini(config, "mpk_arch")]
        self.backend: str = opt.mpk_backend or ini(config, "mpk_backend")
        check_backend(self.backend, "--mpk-backend gpu" if opt.mpk_backend else "ini option mpk_backend = 'gpu'")
        self.emulate_check: bool = opt.mpk_emulate_check
        self.warp_jitter: bool = not opt.mpk_no_warp_jitter
        self.relaunch: bool = not opt.mpk_one_launch
        self.selected_cases: list[str] = opt.mpk_case or []
        artifacts = opt.mpk_artifacts_dir or config.getini("mpk_artifacts_dir") or ".mpk-artifacts"
        self.artifacts_dir = Path(config.rootpath, artifacts) if not os.path.isabs(artifacts) else Path(artifacts)
        check_writable_dir(self.artifacts_dir, "--mpk-artifacts-dir" if opt.mpk_artifacts_dir else "ini option mpk_artifacts_dir")
        self.keep_artifacts: bool = opt.mpk_keep_artifacts
        self.hang_timeout: float = opt.mpk_hang_timeout or ini(config, "mpk_hang_timeout")
        self.rank_timeout: float | None = opt.mpk_rank_timeout
        self.replay: Path | None = Path(opt.mpk_replay).resolve() if opt.mpk_replay else None
        if self.replay is not None and not self.replay.is_dir():  # as a bad --mpk-artifacts-dir is
            what = "does not exist" if not self.replay.exists() else "is not a directory"
            raise pytest.UsageError(
                f"--mpk-replay {opt.mpk_replay}: {self.replay} {what}; give a compile output directory (a kept case's, "
                f"or pk.compile(output_dir=...))"
            )
        self.profile: bool = opt.mpk_profile
        self.sweep_examples: int | None = opt.mpk_sweep_examples
        self.sanitize: str | None = None if os.environ.get(sanitize.CHILD) else opt.mpk_sanitize
        self.sanitizer = sanitize.check_usable(self.sanitize, devices.visible_gpus()) if self.sanitize else None
        # The quick sweep unless more examples, or a Hypothesis profile, were asked for on the command line.
        self.cases_prebuilt = False  # items.py builds every case's module before the first runs (xdist: when cold)
        self.quick_sweeps: bool = self.sweep_examples is None and config.getoption("hypothesis_profile", None) is None
        self.backends: Counter[str] = Counter()
        self._archs: list[str] | None = None
        self._local: tuple[str | None] | None = None
        self.lost_context_in: str | None = None  # in this process
        self.reported_context_losses: set[str] = set()  # the cases reported so, by any worker
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

    def sweep_settings(self) -> dict[str, object]:
        """The Hypothesis settings of every sweep (over the loaded profile): no deadline, as every
        example compiles a kernel; the quick sweep's few derandomized examples, or the long sweep's."""
        from .profiles import QUICK_SWEEP

        if self.sweep_examples is not None:
            return {"deadline": None, "max_examples": self.sweep_examples}
        if self.quick_sweeps:
            return {"deadline": None, **QUICK_SWEEP}
        return {"deadline": None}

    def build_jobs(self) -> int:
        """How many nvcc processes a sweep may run at once: this process's share of the CPUs."""
        return max(1, cpu_share.usable_cores() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))

    def node_from_here(self, item: pytest.Item) -> str:
        """``item``'s node id with its file relative to where pytest was started, not to the rootdir
        (which an option's value that names an existing directory can move)."""
        root = os.path.relpath(item.path, self.config.rootpath)
        if not item.nodeid.startswith(root):
            return item.nodeid
        return os.path.relpath(item.path, self.config.invocation_params.dir) + item.nodeid[len(root) :]

    def repro(self, item: pytest.Item) -> str:
        """One command line that reruns ``item`` with this session's mpk options."""
        arch = getattr(item, "arch", None)
        parts = ["pytest", self.node_from_here(item), "-p", "mpk"]
        if arch:
            parts += ["--arch", arch]
        parts += ["--mpk-backend", self.backend]
        if self.emulate_check:
            parts.append("--mpk-emulate-check")
        if not self.warp_jitter:
            parts.append("--mpk-no-warp-jitter")
        if not self.relaunch:
            parts.append("--mpk-one-launch")
        if getattr(getattr(item, "case", None), "manual", False):  # skipped unless picked
            parts += ["--mpk-case", item.selector]
        if self.replay:
            parts += ["--mpk-replay", str(self.replay)]
        opt = self.config.option
        if opt.mpk_hang_timeout:
            parts += ["--mpk-hang-timeout", str(opt.mpk_hang_timeout)]
        if opt.mpk_rank_timeout:
            parts += ["--mpk-rank-timeout", str(opt.mpk_rank_timeout)]
        if opt.mpk_artifacts_dir:
            parts += ["--mpk-artifacts-dir", str(self.artifacts_dir)]
        if self.sweep_examples is not None and "sweep[" in item.nodeid:
            parts += ["--mpk-sweep-examples", str(self.sweep_examples)]
        return " ".join(shlex.quote(p) for p in parts)

    # -- hooks (this object is registered as a plugin) ------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        properties = dict(report.user_properties)
        backend = properties.get(BACKEND_PROPERTY)
        if backend is not None and report.when == "call":
            self.backends[backend] += 1
        if properties.get(CONTEXT_LOST_PROPERTY) and report.when == "call":
            self.reported_context_losses.add(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.backends:
            parts = ", ".join(f"{n} {b}" for b, n in sorted(self.backends.items()))
            terminalreporter.write_sep("-", f"mpk backends: {parts}")
        unprofiled = sum(n for b, n in self.backends.items() if b != devices.GPU)
        if self.profile and unprofiled:
            terminalreporter.write_line(
                f"mpk: --mpk-profile records cases on the GPU backend only: {unprofiled} case(s) that ran emulated "
                f"or compiled were not profiled"
            )

    # -- a case that kills the CUDA context ------------------------------------------------------
    # A kernel fault (an illegal address, a trap) leaves the process's CUDA context unusable for good.
    # The case that caused it fails with its own error. Without xdist, later GPU cases of the process
    # fail at once with the reason. Under xdist the worker ends itself once the case's reports are
    # sent: xdist gives its other cases to the remaining workers and starts a fresh one, and reports
    # the case once more as crashed, a report pytest_handlecrashitem silences (it said why already).
    def guard_gpu(self, item: pytest.Item, backend: str) -> None:
        if backend == devices.GPU and self.lost_context_in is not None:
            pytest.fail(
                f"not run: the CUDA context of this process was lost in {self.lost_context_in}; with pytest-xdist "
                f"(-n) that worker is replaced and this case runs elsewhere",
                pytrace=False,
            )

    def after_gpu_case(self, item: pytest.Item, backend: str) -> str | None:
        """After a GPU case, still in its call phase: if the CUDA context is lost, remember it and mark
        the case's report; returns the note for the report, else None."""
        if backend != devices.GPU or not devices.context_lost():
            return None
        self.lost_context_in = item.nodeid
        item.user_properties.append((CONTEXT_LOST_PROPERTY, True))
        if hasattr(self.config, "workerinput"):
            return (
                "the CUDA context of this worker is lost: pytest-xdist replaces the worker, and its other cases run on the others"
            )
        return (
            "the CUDA context of this process is lost: later GPU cases of this run fail without running; run with "
            "pytest-xdist (-n) to have them run in a fresh worker"
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        result = yield
        if self.lost_context_in == item.nodeid and hasattr(self.config, "workerinput"):
            # The case's reports are sent (xdist sends each as it is logged); nothing more can run here.
            sys.stderr.write(
                f"\nmpk: the CUDA context is lost after {item.nodeid}; ending this worker so that pytest-xdist replaces it\n"
            )
            sys.stderr.flush()
            os._exit(3)
        return result

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        """The controller's side: a worker that ended itself after its case lost the CUDA context has
        already reported that case's failure; xdist's second, "crashed" report of it becomes a silent
        teardown report, so the case counts once."""
        if crashitem in self.reported_context_losses:
            report.outcome, report.when, report.longrepr = "passed", "teardown", None
