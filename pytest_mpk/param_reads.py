"""Which of a case's parameters its scene reads. A key the scene never reads has no effect: a
misspelling of one that the scene reads with ``params.get(name, default)`` leaves that one at its
default, and the case passes without testing what its key says. So once a case has run to its
golden and passed, every key the case itself gives must have been read (a case that fails says
why first)."""

from __future__ import annotations

import difflib
from typing import Any

from .scene import Case, SceneError


class ReadParams(dict):
    """A case's params that note each name the scene asks for (present or not). Every copy the
    harness hands to a scene method (``copy_of``) shares the notes, so that generate_args,
    kernel_params, build and compute_golden count together. Reading every key at once (iterating,
    ``dict(params)``, ``**params``) counts as reading each."""

    def __init__(self, data: dict[str, Any], reads: set[str] | None = None):
        super().__init__(data)
        self.reads: set[str] = set() if reads is None else reads

    def __getitem__(self, key: str) -> Any:
        self.reads.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.reads.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.reads.add(key)
        return super().__contains__(key)

    def pop(self, key: str, *default: Any) -> Any:
        self.reads.add(key)
        return super().pop(key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.reads.add(key)
        return super().setdefault(key, default)

    def _all(self) -> None:
        self.reads.update(dict.keys(self))

    def __iter__(self):
        self._all()
        return super().__iter__()

    def keys(self):  # type: ignore[override]
        self._all()
        return super().keys()

    def items(self):  # type: ignore[override]
        self._all()
        return super().items()

    def values(self):  # type: ignore[override]
        self._all()
        return super().values()

    def copy(self) -> ReadParams:  # type: ignore[override]
        return copy_of(self)


def copy_of(params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A copy of ``params`` (with ``extra``) for a scene method, which may change its own copy: one
    that shares the notes if ``params`` takes them, a plain dict otherwise. Copied without reading."""
    data = dict(dict.items(params), **extra)
    return ReadParams(data, params.reads) if isinstance(params, ReadParams) else data


def check_all_read(case: Case | None, params: dict[str, Any]) -> None:
    """SceneError naming each key of ``case`` that the scene has not read, once the case ran to its
    golden (so every scene method that takes params has run)."""
    if case is None or not isinstance(params, ReadParams):
        return
    unread = [k for k in case.params if k not in params.reads]
    if not unread:
        return
    asked = sorted(params.reads - set(dict.keys(params)))  # names the scene asked for that no one gave
    hints = []
    for k in unread:
        near = difflib.get_close_matches(k, asked, n=1, cutoff=0.6)
        if near:
            hints.append(f"did you mean {near[0]!r}? The scene asked for {near[0]!r}, which no case or DEFAULTS gives")
    shown = ", ".join(map(repr, unread))
    raise SceneError(
        f"Case {case.name!r} gives {shown}, which the scene never read (generate_args, kernel_params, build and "
        f"compute_golden have run), so {'it has' if len(unread) == 1 else 'they have'} no effect"
        + (f"; {'; '.join(hints)}" if hints else "")
        + "; name each as the scene reads it, or leave it out of the case"
    )
