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
