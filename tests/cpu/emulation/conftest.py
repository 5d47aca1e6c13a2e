"""Fixtures of the host emulation tests: the test kernels built for the host once per session,
plainly and with race checking."""

from __future__ import annotations

import pytest
from emu_helpers import ARCH, HERE, Kernels, kernels_source

from mpk_runtime.run import host_runner


@pytest.fixture(scope="session")
def kernels() -> Kernels:
    """The test kernels, built without race checking."""
    return Kernels(host_runner.load(kernels_source(), ARCH, "emu_test_kernels", include_dirs=[HERE]))


@pytest.fixture(scope="session")
def race_kernels() -> Kernels:
    """The test kernels, built with race checking."""
    return Kernels(host_runner.load(kernels_source(), ARCH, "emu_test_kernels", race_check=True, include_dirs=[HERE]))
