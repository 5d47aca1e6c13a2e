"""The pytest plugin ``mpk`` (``pytest -p mpk``; loaded automatically once installed).

Hooks and options only: the machinery lives in MpkSession (session.py), the nodes in items.py, a
case's run in runner.py. Neither torch nor mpk_runtime is imported at module level (the options
read mpk_runtime's torch-free arch table when they are added), so that loading the plugin is cheap
and xdist workers can be pinned to a GPU before CUDA starts.
"""

from __future__ import annotations

import argparse

import pytest

from . import cpu_share, devices, sanitize
from .items import SceneClass
from .scene import scene_info
from .session import BACKEND_PROPERTY, SESSION_KEY, MpkSession


def session_of(config: pytest.Config) -> MpkSession:
    return config.stash[SESSION_KEY]


# Option parsers raise ArgumentTypeError: argparse shows its message, but replaces a ValueError's
# with "invalid _case_selector value".
def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value > 0:  # "not >": NaN is refused too
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _hang_timeout(text: str) -> float:
    """The watchdog's timeout: what the runtime takes, (0, 3600] seconds (else every case would fail
    with the runtime's message about its own parameter)."""
    from mpk_runtime.harness import WATCHDOG_MAX_S  # torch-free

    value = _positive_float(text)
    if value > WATCHDOG_MAX_S:
        raise argparse.ArgumentTypeError(f"expected at most {WATCHDOG_MAX_S} seconds (the watchdog's limit), got {text!r}")
    return value


def _directory(text: str) -> str:
    """A directory option: an empty value is a mistake (a variable that was not set), not the default."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a directory, got an empty value")
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of examples, got {text!r}")
    return value


def _one_of(*choices: str):
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


def _arch(text: str) -> str:
    from mpk_runtime.harness import ARCH_NAMES  # the one arch table (torch-free)

    return _one_of(*ARCH_NAMES, "auto")(text)


# Ini key -> (its command-line option, the parser that checks it as the option is checked).
INI_OPTIONS = {
    "mpk_arch": ("--arch", _arch),
    "mpk_backend": ("--mpk-backend", _one_of(*devices.BACKENDS)),
    "mpk_hang_timeout": ("--mpk-hang-timeout", _hang_timeout),
}


def _case_selector(text: str) -> str:
    cls, sep, name = text.partition("::")
    if not sep or not cls.isidentifier() or not name or "[" in name:
        raise argparse.ArgumentTypeError(f"expected CLASS::CASE (e.g. TestRMSNorm::b16), got {text!r}")
    return text


def pytest_addoption(parser: pytest.Parser) -> None:
    from mpk_runtime.harness import ARCH_NAMES  # the one arch table (torch-free)

    group = parser.getgroup("mpk", "megakernel scene tests (pytest-mpk)")
    group.addoption(
        "--arch",
        dest="mpk_arch",
        metavar="ARCH",
        action="append",
        choices=(*ARCH_NAMES, "auto"),
        help="Target arch of the cases (repeatable; auto: the local GPU's, sm90 without one)",
    )
    group.addoption(
        "--mpk-backend",
        dest="mpk_backend",
        metavar="BACKEND",
        choices=devices.BACKENDS,
        help="Where cases run: auto (the GPU when it can run the arch, else emulate), gpu, emulate (nvcc "
        "build, then the CUDA task bodies on the CPU emulator), emulate-ref (nvcc build, then the emulator with "
        "each task's PyTorch slice reference) or compile-only",
    )
    group.addoption(
        "--mpk-emulate-check",
        dest="mpk_emulate_check",
        action="store_true",
        default=False,
        help="Emulated cases also check every memory access: data races, uninitialized shared memory and "
        "accesses outside a task's slices (a few times slower)",
    )
    group.addoption(
        "--mpk-no-warp-jitter",
        dest="mpk_no_warp_jitter",
        action="store_true",
        default=False,
        help="Build GPU cases without warp jitter (by default a warp now and then sleeps after a barrier, so a "
        "missing barrier shows); --mpk-sanitize's reruns use it: the tools see races and barriers directly",
    )
    group.addoption(
        "--mpk-one-launch",
        dest="mpk_one_launch",
        action="store_true",
        default=False,
        help="Launch each case once. By default a second launch on the same inputs finds state a task keeps "
        "between launches (a workspace or __device__ variable it never resets); emulated, it also runs the "
        "workers in another order",
    )
    group.addoption(
        "--mpk-case",
        dest="mpk_case",
        metavar="CLASS::CASE",
        action="append",
        type=_case_selector,
        help="Run only this scene case (repeatable; also runs manual cases)",
    )
    group.addoption(
        "--mpk-artifacts-dir",
        dest="mpk_artifacts_dir",
        metavar="DIR",
        type=_directory,
        help="Where a failing case keeps its sources, graph, inputs, outputs and golden (default .mpk-artifacts)",
    )
    group.addoption(
        "--mpk-keep-artifacts",
        dest="mpk_keep_artifacts",
        action="store_true",
        default=False,
        help="Keep the compile outputs (source, graph, signature) of passing cases too",
    )
    group.addoption(
        "--mpk-hang-timeout",
        dest="mpk_hang_timeout",
        metavar="SECONDS",
        type=_hang_timeout,
        help="Seconds without progress before the device watchdog stops a kernel (default 5, at most 3600)",
    )
    group.addoption(
        "--mpk-rank-timeout",
        dest="mpk_rank_timeout",
        metavar="SECONDS",
        type=_positive_float,
        help="Seconds a rank of a multi-rank case waits for the others at each meeting point (default: hang timeout + 60)",
    )
    group.addoption(
        "--mpk-replay",
        dest="mpk_replay",
        metavar="DIR",
        help="Run the selected scenes against this compile output directory instead of building them",
    )
    group.addoption(
        "--mpk-sweep-examples",
        dest="mpk_sweep_examples",
        metavar="N",
        type=_positive_int,
        help="The long sweep: N new examples per SWEEP each run (default: a few fixed examples, built once)",
    )
    group.addoption(
        "--mpk-profile",
        dest="mpk_profile",
        action="store_true",
        default=False,
        help="Record a Perfetto trace, a CSV and a swimlane picture of every GPU case",
    )
    group.addoption(
        "--mpk-sanitize",
        dest="mpk_sanitize",
        metavar="TOOL",
        type=_one_of(*sanitize.TOOLS),
        help="Rerun each GPU case in a subprocess under compute-sanitizer with this tool (memcheck, racecheck, "
        "synccheck or initcheck) and fail it with the findings, mapped to tasks (10 to 100 times slower)",
    )
    parser.addini("mpk_arch", "Default --arch", default="auto")
    parser.addini("mpk_backend", "Default --mpk-backend", default="auto")
    parser.addini("mpk_artifacts_dir", "Default --mpk-artifacts-dir", default=".mpk-artifacts")
    parser.addini("mpk_hang_timeout", "Default --mpk-hang-timeout", default="5")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """The Hypothesis profiles, registered before any conftest runs: a conftest's profile of the same
    name replaces ours, and ours replace Hypothesis' built-in ``ci``."""
    from . import profiles

    profiles.register()


XDIST_OFF_KEY = pytest.StashKey[str]()  # why xdist was turned off, for the report header


@pytest.hookimpl(wrapper=True)  # a wrapper runs before every plain implementation, xdist's included
def pytest_cmdline_main(config: pytest.Config):
    """Under mpirun every rank runs every item in step, in its own process on its own GPU: xdist
    workers (our addopts' ``-n auto``, say) would split the items between processes and pin them to
    GPUs of their own, so an MPI job of several ranks runs without them."""
    from mpk_runtime.harness import mpi_job  # reads the launcher's environment only

    job = mpi_job()
    if job is not None and job[0] > 1 and getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"
        config.stash[XDIST_OFF_KEY] = f"{job[0]} ranks under MPI: pytest-xdist is off (each rank runs every item in step)"
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from mpk_runtime.harness import mpi_job  # reads the launcher's environment only

    workerinput = getattr(config, "workerinput", None)
    job = mpi_job()
    if workerinput is not None:
        devices.pin_worker(workerinput["workerid"])  # before anything can initialise CUDA
        cpu_share.share_cores(workerinput["workercount"])
    elif job is not None and job[0] > 1:
        devices.pin_rank(job[2])  # one GPU per rank, every GPU visible (peers map each other's memory)
    config.addinivalue_line("markers", "mpk_arch(*archs): run this test only for these archs (sm80, sm90, sm100)")
    config.addinivalue_line("markers", "mpk_gpus(n): this test needs n GPUs; skipped with fewer")
    config.addinivalue_line("markers", "mpk_slow: a slow test (deselect with -m 'not mpk_slow')")
    config.addinivalue_line("markers", "mpk_params(**params): PersistentKernel init parameters for the pk fixture")
    config.addinivalue_line("markers", "mpk_world_size(n): a scene class that runs on n ranks, one GPU each")
    mpk = MpkSession(config)
    config.stash[SESSION_KEY] = mpk
    config.pluginmanager.register(mpk, "mpk-session")
    if job is not None and job[1] > 0 and workerinput is None:
        devices.quiet_rank(mpk.artifacts_dir / f"rank{job[1]}.log")  # rank 0 reports for every rank


def pytest_unconfigure(config: pytest.Config) -> None:
    """A rank that stopped responding is still in the MPI job: end the job, after the report."""
    import sys

    ranks = sys.modules.get("pytest_mpk.ranks")
    why = ranks.must_abort() if ranks is not None else None
    if why is not None:
        from mpk_runtime.harness import mpi_world

        sys.stderr.write(f"\nmpk: {why}; aborting the MPI job so that no rank is left behind\n")
        sys.stderr.flush()
        world = mpi_world()
        if world is not None:
            world.abort(1)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which installation runs: the packages' location and version (found without importing them)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("mpk_runtime")
    where = spec.origin if spec is not None else "not found"
    lines = [f"mpk: pytest-mpk {importlib.metadata.version('pytest-mpk')}, mpk_runtime at {where}"]
    if XDIST_OFF_KEY in config.stash:
        lines.append(f"mpk: {config.stash[XDIST_OFF_KEY]}")
    return lines


@pytest.hookimpl(tryfirst=True)  # before xdist's own answer (the CPU count), which would win otherwise
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker per visible GPU (None: xdist's own default, e.g. without GPUs)."""
    return len(devices.visible_gpus()) or None


def pytest_collect_file(file_path, parent: pytest.Collector):
    """A compile output directory named on the command line replays as it is (see replay.py); one
    met while collecting a folder (kept artifacts, say) is not a test."""
    from .replay import MissingSignature, ReplayFile, is_signature, lacks_its_signature

    if is_signature(file_path) or lacks_its_signature(file_path):
        named = {str(parent.config.invocation_params.dir.joinpath(a.split("::")[0]).resolve()) for a in parent.config.args}
        if str(file_path.resolve()) in named or str(file_path.parent.resolve()) in named:
            kind = ReplayFile if is_signature(file_path) else MissingSignature
            return kind.from_parent(parent, path=file_path)
    return None


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object):
    if scene_info(obj) is not None:
        return SceneClass.from_parent(collector, name=name, scene_cls=obj)
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mpk_arch" not in metafunc.fixturenames:
        return
    archs = session_of(metafunc.config).archs
    marker = metafunc.definition.get_closest_marker("mpk_arch")
    if marker is not None:
        archs = [a for a in archs if a in marker.args] or [f"{archs[0]}-not-in-{'-'.join(marker.args)}"]
    metafunc.parametrize("mpk_arch", archs, ids=archs, indirect=True, scope="function")  # the fixture skips


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    from .selection import apply_case_selection, longest_first, require_gpus

    apply_case_selection(config, items)
    require_gpus(items)
    if hasattr(config, "workerinput"):
        longest_first(items)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    backend = dict(getattr(report, "user_properties", ())).get(BACKEND_PROPERTY)
    if backend is None or report.when != "call":
        return None
    if report.passed:
        return "passed", ".", (f"PASSED [{backend}]", {"green": True})
    if report.failed:
        return "failed", "F", (f"FAILED [{backend}]", {"red": True})
    return None


from .fixtures import _mpk_backend, mpk_arch, mpk_device, mpk_params, pk  # noqa: E402,F401  (the plugin's fixtures)
