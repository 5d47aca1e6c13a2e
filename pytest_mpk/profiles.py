"""Hypothesis settings for scene sweeps.

By default a sweep is quick: QUICK_SWEEP's few derandomized examples, the same in every run, so
their modules are built once and found in the cache afterwards. The long sweep draws new examples
each run: ``--mpk-sweep-examples N``, or a profile picked with ``--hypothesis-profile NAME``:
``dev`` (10 examples), ``ci`` (reproducible: derandomized, no example database) or ``thorough``
(200). None has a deadline: every example compiles a kernel. A profile of the same name registered
by the project's conftest files wins (the plugin registers its own before they run)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

PROFILES = {
    "dev": dict(max_examples=10, deadline=None),
    "ci": dict(max_examples=10, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]),
    "thorough": dict(max_examples=200, deadline=None),
}


# Few examples, derandomized (by the sweep's node id) and without the example database.
QUICK_SWEEP = dict(max_examples=5, derandomize=True, database=None)


def register() -> None:
    """Register every profile, replacing one of the same name (Hypothesis' own ``ci``, say, whose
    100 examples would each compile a kernel)."""
    for name, kwargs in PROFILES.items():
        settings.register_profile(name, **kwargs)
