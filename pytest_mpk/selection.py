"""Selecting items after collection: ``--mpk-case CLASS::CASE`` (strictly validated) and the
``mpk_gpus(n)`` marker."""

from __future__ import annotations

import difflib

import pytest

from . import devices
from .session import SESSION_KEY


def apply_case_selection(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = config.stash[SESSION_KEY].selected_cases
    if not wanted:
        return
    from .items import _SceneItem

    known = sorted({i.selector for i in items if isinstance(i, _SceneItem)})
    for sel in wanted:
        if sel not in known:
            near = difflib.get_close_matches(sel, known, n=3)
            hint = (
                f"did you mean {', '.join(near)}?"
                if near
                else (
                    f"collected cases: {', '.join(known[:20])}{' ...' if len(known) > 20 else ''}"
                    if known
                    else "no scene cases were collected from the given paths"
                )
            )
            message = f"--mpk-case {sel}: no such scene case; {hint}"
            if hasattr(config, "workerinput"):
                # An xdist worker cannot stop the session cleanly; every worker reports the same
                # single failing item instead (xdist needs identical collections).
                items[:] = [SelectionError.from_parent(config.stash[SESSION_KEY].session, name="mpk-case", message=message)]
                return
            raise pytest.UsageError(message)
    keep = [i for i in items if isinstance(i, _SceneItem) and i.selector in wanted]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


class SelectionError(pytest.Item):
    """Stands for the whole run when --mpk-case names nothing, under pytest-xdist."""

    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise pytest.UsageError(self.message)

    def repr_failure(self, excinfo, style=None):
        return self.message

    def reportinfo(self):
        return self.path, None, "--mpk-case"


def longest_first(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, hand out sweeps (each example compiles) before single cases, so that no
    worker starts a long item while the others run out of work. Deterministic, as xdist requires
    every worker to collect the same order."""
    from .items import SweepItem

    items.sort(key=lambda item: not isinstance(item, SweepItem))


def require_gpus(items: list[pytest.Item]) -> None:
    have = None
    for item in items:
        marker = item.get_closest_marker("mpk_gpus")
        if marker is None:
            continue
        need = marker.args[0] if marker.args else marker.kwargs.get("n", 1)
        if have is None:
            have = len(devices.visible_gpus())
        if have < need:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPUs, {have} visible"))
