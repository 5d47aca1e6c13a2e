"""Repo-wide test settings: the Hypothesis profile (the mpk plugin registers dev / ci / thorough)
and the markers of this repository's own tests."""

from __future__ import annotations

import os

from hypothesis import settings

pytest_plugins = ["pytester"]  # tests/cpu/plugin tests the mpk plugin the way pytest-xdist tests itself


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (tests/gpu)")
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
