"""Repo-wide test settings: Hypothesis profiles and markers."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# dev: quick local runs; ci: reproducible (derandomized, no example database); thorough: many examples.
settings.register_profile("dev", max_examples=10, deadline=None)
settings.register_profile("ci", max_examples=10, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (tests/gpu)")
