"""Fixtures of the CPU suite: the build cache, and compile-only kernels; the session's objects kept
out of the garbage collector's full passes, and the longest tests handed out first."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The runtime (and torch, which it imports) only in the fixtures: pytest imports this conftest in
# xdist's controller as well, which runs no test and starts the workers only after its own start.
if TYPE_CHECKING:
    import mpk_runtime as mpk
    from mpk_runtime.build import cache as build


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "long_running: a test of several seconds (whole pytest sessions in subprocesses), run first"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``long_running`` first (a stable sort: the rest keep their order, and every
    xdist worker collects the same order). xdist steals queued tests, not running ones: one of them
    taken last ran alone at the end of the warm default suite, the other worker idle for 8 s."""
    items.sort(key=lambda item: item.get_closest_marker("long_running") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the process holds once its items are collected (torch's objects, the items, the modules)
    stays to the session's end, so it is frozen out of the collector (``gc.freeze``). Each pytester run
    in this suite ends with full collections (pytest's own, for unraisable exceptions); they walked it
    all again, 0.25-0.45 s each on the 2-core machine, about 9 s of a worker's warm run."""
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def mpk_cache_dir() -> Iterator[Path]:
    """The build cache of the session: ``$MPK_CACHE_DIR``, else the runtime's default, so that a
    second run finds every module the first one built. Entries are keyed by content, so sharing is
    safe; tests that need an empty or a damaged cache make their own. Set in the environment, so that
    inner runs, xdist workers and subprocesses use the same one."""
    from mpk_runtime.build import cache as build

    root = build.cache_root()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MPK_CACHE_DIR", str(root))
        yield root


@pytest.fixture
def make_pk() -> Callable[..., mpk.PersistentKernel]:
    """Factory of compile-only PersistentKernels (no GPU needed): ``make_pk(90, test_mode=True)``."""
    import mpk_runtime as mpk

    def make(target_cc: int = 80, **overrides) -> mpk.PersistentKernel:
        params = mpk.PersistentKernel.get_default_init_parameters()
        params.update(compile_only=True, target_cc=target_cc)
        params.update(overrides)
        return mpk.PersistentKernel(**params)

    return make


@pytest.fixture(scope="session")
def noop_source() -> str:
    """The generated source of the smallest graph (one no-op layer) for sm80: the cheapest nvcc build."""
    from cpu_helpers import GraphBuilder

    from mpk_runtime.codegen import dispatcher as codegen
    from mpk_runtime.graph import collect_variants

    g = GraphBuilder()
    g.noop([g.tensor("a")], [g.tensor("b")], 2)
    variants, _ = collect_variants(g.graph)
    return codegen.generate(variants, "sm80")


@pytest.fixture(scope="session")
def noop_build(noop_source: str, mpk_cache_dir: Path) -> build.BuildResult:
    """``noop_source`` built (or found) in the session's cache, once per session: the full build (a
    shared library with the host side of the runtime, which only the GPU backend builds otherwise),
    so that the CPU suite compiles csrc/runtime/host.cuh and loads and checks its ABI (test_abi.py)."""
    from mpk_runtime.build import cache as build

    return build.build_module(noop_source, "sm80", "noop")


@pytest.fixture(scope="session")
def noop_cubin(noop_source: str, mpk_cache_dir: Path) -> build.BuildResult:
    """``noop_source``'s device-only build (a cubin, what kernels off the GPU build), once per session."""
    from mpk_runtime.build import cache as build

    return build.build_module(noop_source, "sm80", "noop", device_only=True)
