"""Hypothesis profiles for scene sweeps: ``dev`` (quick), ``ci`` (reproducible: derandomized, no
example database) and ``thorough``. None has a deadline: every example compiles a kernel. Pick one
with ``--hypothesis-profile NAME``; a profile of the same name registered by the project's conftest
files wins (the plugin registers its own before they run)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

PROFILES = {
    "dev": dict(max_examples=10, deadline=None),
    "ci": dict(max_examples=10, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]),
    "thorough": dict(max_examples=200, deadline=None),
}


def register() -> None:
    """Register every profile, replacing one of the same name (Hypothesis' own ``ci``, say, whose
    100 examples would each compile a kernel)."""
    for name, kwargs in PROFILES.items():
        settings.register_profile(name, **kwargs)
