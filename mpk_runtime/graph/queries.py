"""Questions about a compiled graph that a raw read of its JSON cannot answer: what is the longest
chain, what feeds this task, what does this event wait for (``mpk-graph`` prints the answers)."""

from __future__ import annotations

from collections import Counter

from ..errors import GraphError
from .compiled import CompiledGraph, EventInfo

HAZARD_STYLE = {"raw": "solid", "war": "dashed", "waw": "dotted"}


def dependents(g: CompiledGraph) -> list[list[tuple[int, str]]]:
    out: list[list[tuple[int, str]]] = [[] for _ in g.tasks]
    for t in g.tasks:
        for d, hazard in t.deps:
            out[d].append((t.id, hazard))
    return out


def critical_path(g: CompiledGraph) -> list[int]:
    """The longest dependency chain, as task ids from source to sink (ties: lowest ids). Producers
    always come before their consumers in a compiled graph, so one pass in id order suffices."""
    depth, prev = [1] * len(g.tasks), [-1] * len(g.tasks)
    for t in g.tasks:
        for d, _ in t.deps:
            if depth[d] + 1 > depth[t.id] or (depth[d] + 1 == depth[t.id] and d < prev[t.id]):
                depth[t.id], prev[t.id] = depth[d] + 1, d
    if not g.tasks:
        return []
    end = max(range(len(g.tasks)), key=lambda i: (depth[i], -i))
    path = [end]
    while prev[path[-1]] >= 0:
        path.append(prev[path[-1]])
    return path[::-1]


def _extreme(counts: list[int], g: CompiledGraph, what: str) -> dict:
    if not counts:
        return {what: 0, "task": None, "label": None}
    i = max(range(len(counts)), key=lambda i: (counts[i], -i))
    return {what: counts[i], "task": i, "label": g.tasks[i].label}


def summary(g: CompiledGraph, path: str) -> dict:
    events = g.schedule.events
    path_ids = critical_path(g)
    return {
        "file": path,
        "arch": g.arch,
        "rank": g.rank,
        "policy": g.schedule.policy,
        "num_workers": g.schedule.num_workers,
        "tasks": len(g.tasks),
        "layers": len(g.layers),
        "events": len(events),
        "tasks_by_type": dict(Counter(g.layers[t.layer].task for t in g.tasks)),
        "tasks_by_layer": dict(Counter(g.layers[t.layer].name for t in g.tasks)),
        "tasks_by_worker": {str(w): n for w, n in sorted(Counter(t.worker for t in g.tasks).items())},
        "tasks_waiting_on_an_event": sum(t.wait_event is not None for t in g.tasks),
        "trigger_count_histogram": {str(k): v for k, v in sorted(Counter(e.trigger_count for e in events).items())},
        "critical_path": {"length_tasks": len(path_ids), "tasks": [g.tasks[i].label for i in path_ids]},
        "max_fan_in": _extreme([len(t.deps) for t in g.tasks], g, "deps"),
        "max_fan_out": _extreme([len(u) for u in dependents(g)], g, "dependents"),
    }


def event(g: CompiledGraph, n: int) -> EventInfo:
    events = g.schedule.events
    if not 0 <= n < len(events):
        raise GraphError(f"no event {n}; this graph has {len(events)} events{f' (ids 0..{len(events) - 1})' if events else ''}")
    return events[n]


def _ref(g: CompiledGraph, i: int, **extra) -> dict:
    t = g.tasks[i]
    return {"task": i, "label": t.label, "worker": t.worker, **extra}


def _slices(slices) -> list[dict]:
    return [{"tensor": s.tensor, "lo": list(s.lo), "hi": list(s.hi), "byte_offset": s.byte_offset} for s in slices]


def task_detail(g: CompiledGraph, n: int) -> dict:
    if not 0 <= n < len(g.tasks):
        raise GraphError(f"no task {n}; this graph has tasks 0..{len(g.tasks) - 1}")
    t = g.tasks[n]
    layer = g.layers[t.layer]
    wait = None
    if t.wait_event is not None:
        e = event(g, t.wait_event)
        wait = {"event": e.id, "trigger_count": e.trigger_count, "producers": list(e.producers)}
    return {
        "id": n,
        "label": t.label,
        "layer": layer.name,
        "task_type": layer.task,
        "opcode": layer.opcode,
        "grid_idx": list(t.grid_idx),
        "worker": t.worker,
        "queue_position": g.schedule.queues[t.worker].index(n),
        "wait_event": wait,
        "deps": [_ref(g, d, hazard=h) for d, h in t.deps],
        "dependents": [_ref(g, u, hazard=h) for u, h in dependents(g)[n]],
        "triggers": [
            {"event": e, "trigger_count": event(g, e).trigger_count, "consumers": list(event(g, e).consumers)} for e in t.triggers
        ],
        "inputs": _slices(t.inputs),
        "outputs": _slices(t.outputs),
    }


def event_detail(g: CompiledGraph, n: int) -> dict:
    e = event(g, n)
    return {
        "id": n,
        "trigger_count": e.trigger_count,
        "producers": [_ref(g, i) for i in e.producers],
        "consumers": [_ref(g, i) for i in e.consumers],
    }


def _quote(*lines: str) -> str:
    """A DOT string: quotes and backslashes escaped, lines joined by DOT's own line break."""
    return '"' + "\\n".join(s.replace("\\", "\\\\").replace('"', '\\"') for s in lines) + '"'


def dot(g: CompiledGraph) -> str:
    """Tasks as boxes (label and worker) in one cluster per layer; dependency edges styled by hazard."""
    lines = ["digraph mpk_task_graph {", "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
    by_layer: dict[int, list[int]] = {}
    for t in g.tasks:
        by_layer.setdefault(t.layer, []).append(t.id)
    for layer in g.layers:
        lines.append(f"  subgraph cluster_{layer.id} {{")
        lines.append(f"    label={_quote(layer.name + ' (' + layer.task + ')')};")
        for i in by_layer.get(layer.id, []):
            t = g.tasks[i]
            lines.append(f"    t{t.id} [label={_quote(t.label, f'worker {t.worker}')}];")
        lines.append("  }")
    for t in g.tasks:
        for d, hazard in t.deps:
            lines.append(f"  t{d} -> t{t.id} [style={HAZARD_STYLE.get(hazard, 'solid')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
