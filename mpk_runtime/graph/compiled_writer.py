"""The task graph JSON as text: one line per top-level key and per element of a top-level list
(one task per line: greppable, diffable, and still plain JSON).

A graph has a line per task, so task lines are written straight from the TaskInfo, not through
a dict and the generic encoder: the text is the same as ``dumps(graph.to_json())``, a few times
faster (tests/cpu/test_graph.py checks that they agree).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as _string  # json.dumps' own, for one string
from typing import Any

from .bulk import gc_paused
from .compiled import CompiledGraph, SliceRef, TaskInfo

_COMPACT = json.JSONEncoder(separators=(",", ":"))


def dumps(data: dict) -> str:
    """JSON with one line per top-level key, and one line per element of a top-level list."""
    parts = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            parts.append(_list(key, [_COMPACT.encode(v) for v in value]))
        else:
            parts.append(f"{json.dumps(key)}: {_COMPACT.encode(value)}")
    return _document(parts)


@gc_paused()
def graph_text(graph: CompiledGraph) -> str:
    """``dumps(graph.to_json())``, with the task lines written directly."""
    data: dict[str, Any] = graph.to_json(tasks=False)
    names = {t.name: json.dumps(t.name) for t in graph.tensors}
    parts = []
    for key, value in data.items():
        if key == "tasks":
            parts.append(_list(key, [_task(t, names) for t in graph.tasks]) if graph.tasks else '"tasks": []')
        elif isinstance(value, list) and value:
            parts.append(_list(key, [_COMPACT.encode(v) for v in value]))
        else:
            parts.append(f"{json.dumps(key)}: {_COMPACT.encode(value)}")
    return _document(parts)


def _list(key: str, lines: list[str]) -> str:
    return f"{json.dumps(key)}: [\n  " + ",\n  ".join(lines) + "\n ]"


def _document(parts: list[str]) -> str:
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def _ints(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def _slice(s: SliceRef, names: dict[str, str]) -> str:
    return f'{{"tensor":{names[s.tensor]},"lo":[{_ints(s.lo)}],"hi":[{_ints(s.hi)}],"byte_offset":{s.byte_offset}}}'


def _task(t: TaskInfo, names: dict[str, str]) -> str:
    x, y, z = t.grid_idx
    deps = ",".join(f'{{"task":{d},"hazard":"{h}"}}' for d, h in t.deps)
    return (
        f'{{"id":{t.id},"label":{_string(t.label)},"layer":{t.layer},"variant":{t.variant},"grid_idx":[{x},{y},{z}],'
        f'"inputs":[{",".join(_slice(s, names) for s in t.inputs)}],'
        f'"outputs":[{",".join(_slice(s, names) for s in t.outputs)}],'
        f'"deps":[{deps}],"worker":{t.worker},"wait_event":{"null" if t.wait_event is None else t.wait_event},'
        f'"triggers":[{_ints(t.triggers)}]}}'
    )
