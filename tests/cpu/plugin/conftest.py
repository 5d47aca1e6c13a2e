"""Fixtures of the plugin's own tests.

Each test writes scene files with ``pytester`` and runs pytest on them: in process where it can
(fast), in a subprocess where a clean process matters (xdist, ``python test_x.py``). Every case
here runs for real: nvcc builds the module for the arch, g++ builds it for the host, and the CPU
emulator runs the task graph with the CUDA task bodies.
Builds are shared through the session's compile cache (``MPK_CACHE_DIR``, set for all of tests/cpu
by its conftest, inherited by every inner run, and kept between runs), so the scenes stick to a few small graphs:
``NormScene`` with batch 2 and hidden 256, and ``ProbeScene`` with rows of 4 int32, whose build does
not depend on the batch.
"""

from __future__ import annotations

import importlib

import pytest

from pytest_mpk import devices

SCENES = '''
"""Base classes of the scenes under test; each test file decorates its own subclasses."""

import torch

from pytest_mpk import Out, SceneTestCase


def rmsnorm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


class NormScene(SceneTestCase):
    """rmsnorm over (batch, hidden) float32, one row per task."""

    def generate_args(self, params):
        b, h = params["batch"], params["hidden"]
        return {"input": torch.randn(b, h), "weight": torch.randn(h), "output": Out(torch.empty(b, h))}

    def build(self, pk, t, params):
        pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.output,
                         grid_dim=(params["batch"], 1, 1), block_dim=pk.block_dim)


class ProbeScene(SceneTestCase):
    """noop(probe=True) over (batch, 4) int32, one row per task: every element of an output row is
    1 + the largest element of its input row."""

    def generate_args(self, params):
        x = torch.randint(1, 1000, (params["batch"], 4), dtype=torch.int32)
        return {"x": x, "y": Out(torch.empty_like(x))}

    def build(self, pk, t, params):
        pk.noop_layer(inputs=[t.x], outputs=[t.y], grid_dim=(params["batch"], 1, 1),
                      block_dim=pk.block_dim, probe=True)

    def compute_golden(self, args, params):
        return args.x.amax(dim=1, keepdim=True).expand_as(args.x) + 1
'''


@pytest.fixture(scope="session", autouse=True)
def _lazy_imports_done() -> None:
    """Import now what a scene's run imports lazily. ``runpytest_inprocess`` drops the modules a run
    imported when it ends, and torch refuses to import some twice (torch.testing.assert_close pulls
    in torch.distributed, whose operator library can be registered once per process). The runtime
    too: mpk_runtime imports PersistentKernel (and with it run/) on first use, and a module dropped
    after one run would stay behind as its package's attribute, so that the next run's ``from . import``
    would find the dropped module while other imports find a fresh one (two kinds of its ctypes
    structures)."""
    import torch

    import mpk_runtime

    torch.testing.assert_close(torch.zeros(1), torch.zeros(1))
    assert mpk_runtime.PersistentKernel  # imports the whole pipeline now
    # The plugin's multi-rank modules, imported by the first multi-rank item: a test that patches
    # one of them must patch the module every inner run uses.
    importlib.import_module("pytest_mpk.rank_items")


@pytest.fixture(autouse=True)
def _inner_runs_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs started by a test are not workers of this run's xdist, even when the test runs in one
    (pytest-benchmark, for one, would disable itself with a warning in every inner run)."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs see no GPU, on any machine, so that what they report (arch "auto" is sm90, cases
    are emulated) is the same everywhere: no GPU for subprocesses, no local arch in this one."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(devices, "local_arch", lambda: None)


@pytest.fixture
def scenes(pytester: pytest.Pytester) -> None:
    """scenes.py in the pytester directory (``NormScene``, ``ProbeScene`` and an ``rmsnorm``
    function), for the test files a test writes to import and subclass."""
    pytester.makepyfile(scenes=SCENES)
