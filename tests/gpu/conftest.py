"""GPU tests: skipped as a whole where torch sees no CUDA device."""

from __future__ import annotations

import pytest
import torch

import mpk_runtime as mpk

if not torch.cuda.is_available():
    pytest.skip("tests/gpu need a CUDA GPU", allow_module_level=True)


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
