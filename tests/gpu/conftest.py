"""GPU tests: skipped as a whole where torch sees no CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import mpk_runtime as mpk

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Marked, not skipped at import: a module-level skip in a conftest that pytest loads at start-up
    # (``pytest tests/gpu``) would stop the whole session with a traceback.
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="tests/gpu need a CUDA GPU")
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(skip)


@pytest.fixture
def make_pk():
    """Factory of test-mode PersistentKernels with this GPU's worker configuration; every kernel
    it made is finalized at teardown."""
    made = []

    def make(**overrides):
        params = mpk.PersistentKernel.get_default_init_parameters()
        workers, schedulers = mpk.get_configurations_from_gpu(torch.cuda.current_device())
        params.update(test_mode=True, num_workers=workers, num_local_schedulers=schedulers)
        params.update(overrides)
        pk = mpk.PersistentKernel(**params)
        made.append(pk)
        return pk

    yield make
    for pk in made:
        pk.finalize()


@pytest.fixture
def probe_chain():
    """Builder of a compiled chain of n no-op probe tasks on a kernel, each writing its input + 1: the n + 1
    int32 tensors, the first 1 and the others -7 until a launch runs (then 1, 2, ..., n + 1)."""

    def build(pk, n: int = 6) -> list:
        ts = [pk.attach_input(torch.full((1,), -7, dtype=torch.int32, device="cuda"), f"t{i}") for i in range(n + 1)]
        ts[0].data.fill_(1)
        for i in range(n):
            pk.noop_layer([ts[i]], [ts[i + 1]], grid_dim=(1, 1, 1), block_dim=pk.block_dim, probe=True)
        pk.compile()
        return ts

    return build
