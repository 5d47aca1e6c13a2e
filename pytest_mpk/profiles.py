"""Hypothesis profiles for scene sweeps: ``dev`` (quick), ``ci`` (reproducible: derandomized, no
example database) and ``thorough``. None has a deadline: every example compiles a kernel. Pick one
with ``--hypothesis-profile NAME``; a profile of the same name defined by the project wins."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

PROFILES = {
    "dev": dict(max_examples=10, deadline=None),
    "ci": dict(max_examples=10, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.too_slow]),
    "thorough": dict(max_examples=200, deadline=None),
}


def register() -> None:
    for name, kwargs in PROFILES.items():
        try:
            settings.get_profile(name)
        except InvalidArgument:
            settings.register_profile(name, **kwargs)
