"""What every rank of a multi-rank kernel must build alike, and where two ranks differ.

The ranks' tasks run in lock step and address each other's tensors by position, so the layers,
the tensors they name and the schedule must be the same on every rank. On GPUs the ranks compare
digests of these parts (transport.fingerprint); the emulator, which holds every rank's graph,
compares the parts themselves and names the first difference.
"""

from __future__ import annotations

from typing import Any

from ..graph.compiled import CompiledGraph


def matching_parts(graph: CompiledGraph) -> dict[str, Any]:
    """The JSON parts that must be equal on every rank: the tensors and layers, and the schedule
    (the tasks without their slices, which a rank's own tensors give)."""
    data = graph.to_json()
    tasks = [{k: v for k, v in t.items() if k not in ("inputs", "outputs")} for t in data["tasks"]]
    return {"tensors": data["tensors"], "layers": data["layers"], "tasks": tasks, "schedule": data["schedule"]}


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first place (a path such as ``layers[1].grid``) where two JSON values differ, with both
    values there; None when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in a or key not in b:
                return (f"{path}.{key}".lstrip("."), a.get(key, "(none)"), b.get(key, "(none)"))
            found = first_difference(a[key], b[key], f"{path}.{key}".lstrip("."))
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return (f"{path} (length)", len(a), len(b))
        return None
    return None if a == b else (path, a, b)
