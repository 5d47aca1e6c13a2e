"""``mpk-graph``: inspect a ``task_graph_rank{r}.json`` (written by ``compile(output_dir=...)``).

    mpk-graph task_graph_rank0.json              summary: tasks per type and layer, events, trigger-count
                                                 histogram, critical path, fan-in / fan-out extremes
    mpk-graph task_graph_rank0.json --task N     one task: deps (with hazards), dependents, worker, wait
                                                 event, triggered events, slices
    mpk-graph task_graph_rank0.json --event N    one event: producers, consumers, trigger count
    mpk-graph task_graph_rank0.json --dot FILE   Graphviz: tasks as nodes clustered by layer, deps as edges

The file is one task per line for grep and diff; this tool answers the questions a raw read cannot
(what is the longest chain, what feeds this task, what does this event wait for).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from .common import CliError, JsonArgumentParser, run

TASK_KEYS = ("label", "layer", "deps", "worker", "wait_event", "triggers", "inputs", "outputs")
HAZARD_STYLE = {"raw": "solid", "war": "dashed", "waw": "dotted"}


def parser() -> JsonArgumentParser:
    p = JsonArgumentParser(prog="mpk-graph", description="Inspect a pytest-mpk task graph JSON; prints JSON")
    p.add_argument("graph", metavar="GRAPH.json", help="task_graph_rank{r}.json from compile(output_dir=...)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--task", type=int, metavar="N", help="Details of task N")
    what.add_argument("--event", type=int, metavar="N", help="Details of event N")
    what.add_argument("--dot", metavar="FILE", help="Write the graph in Graphviz DOT to FILE")
    return p


def main(argv: list[str] | None = None) -> int:
    return run(lambda: answer(parser().parse_args(argv)))


def answer(args: argparse.Namespace) -> dict:
    g = load(args.graph)
    if args.task is not None:
        return task_detail(g, args.task)
    if args.event is not None:
        return event_detail(g, args.event)
    if args.dot is not None:
        text = dot(g)
        Path(args.dot).write_text(text)
        return {"dot": args.dot, "nodes": len(g["tasks"]), "edges": sum(len(t["deps"]) for t in g["tasks"])}
    return summary(g, args.graph)


def load(path: str) -> dict:
    try:
        g = json.loads(Path(path).read_text())
    except OSError as e:
        raise CliError(f"cannot read task graph {path!r}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise CliError(f"{path}: not JSON ({e})") from None
    if not isinstance(g, dict) or g.get("format") != "mpk-task-graph":
        raise CliError(f"{path}: not a task graph (expected \"format\": \"mpk-task-graph\", as compile(output_dir=...) "
                       f"writes in task_graph_rank{{r}}.json)")
    try:
        ids = [t["id"] for t in g["tasks"]]
        layers = {layer["id"] for layer in g["layers"]}
        for t in g["tasks"]:
            missing = [k for k in TASK_KEYS if k not in t]
            if missing:
                raise CliError(f"{path}: task {t['id']} lacks {', '.join(missing)}")
            if t["layer"] not in layers:
                raise CliError(f"{path}: task {t['id']} is in layer {t['layer']}, which the graph does not have")
            bad = [d["task"] for d in t["deps"] if not 0 <= d["task"] < len(ids)]
            if bad:
                raise CliError(f"{path}: task {t['id']} depends on tasks {bad} that do not exist")
        if "queues" not in g["schedule"]:
            raise CliError(f"{path}: the schedule lacks its worker queues")
    except (KeyError, TypeError) as e:
        raise CliError(f"{path}: malformed task graph ({type(e).__name__}: {e})") from None
    if ids != list(range(len(ids))):
        raise CliError(f"{path}: task ids must be 0..{len(ids) - 1} in order")
    return g


def dependents(g: dict) -> list[list[dict]]:
    out: list[list[dict]] = [[] for _ in g["tasks"]]
    for t in g["tasks"]:
        for d in t["deps"]:
            out[d["task"]].append({"task": t["id"], "hazard": d["hazard"]})
    return out


def critical_path(g: dict) -> list[int]:
    """The longest dependency chain, as task ids from source to sink (ties: lowest ids). Tasks are
    ordered topologically (Kahn), not assumed to be, so a cycle is reported instead of looping."""
    tasks = g["tasks"]
    users = dependents(g)
    pending = [len(t["deps"]) for t in tasks]
    ready = [t["id"] for t in tasks if not t["deps"]]
    depth, prev = [1] * len(tasks), [-1] * len(tasks)
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for u in users[n]:
            m = u["task"]
            if depth[n] + 1 > depth[m] or (depth[n] + 1 == depth[m] and n < prev[m]):
                depth[m], prev[m] = depth[n] + 1, n
            pending[m] -= 1
            if pending[m] == 0:
                ready.append(m)
    if seen != len(tasks):
        raise CliError(f"the dependencies form a cycle through {len(tasks) - seen} tasks; this is not a valid task graph")
    if not tasks:
        return []
    end = max(range(len(tasks)), key=lambda i: (depth[i], -i))
    path = [end]
    while prev[path[-1]] >= 0:
        path.append(prev[path[-1]])
    return path[::-1]


def _extreme(counts: list[int], g: dict, what: str) -> dict:
    if not counts:
        return {what: 0, "task": None, "label": None}
    i = max(range(len(counts)), key=lambda i: (counts[i], -i))
    return {what: counts[i], "task": i, "label": g["tasks"][i]["label"]}


def summary(g: dict, path: str) -> dict:
    layers = {layer["id"]: layer for layer in g["layers"]}
    events = g["schedule"].get("events", [])
    path_ids = critical_path(g)
    return {
        "file": path, "arch": g.get("arch"), "rank": g.get("rank"),
        "policy": g["schedule"].get("policy"), "num_workers": g["schedule"].get("num_workers"),
        "tasks": len(g["tasks"]), "layers": len(g["layers"]), "events": len(events),
        "tasks_by_type": dict(Counter(layers[t["layer"]]["task"] for t in g["tasks"])),
        "tasks_by_layer": dict(Counter(layers[t["layer"]]["name"] for t in g["tasks"])),
        "tasks_by_worker": dict(sorted(Counter(str(t["worker"]) for t in g["tasks"]).items(), key=lambda kv: int(kv[0]))),
        "tasks_waiting_on_an_event": sum(t["wait_event"] is not None for t in g["tasks"]),
        "trigger_count_histogram": {str(k): v for k, v in sorted(Counter(e["trigger_count"] for e in events).items())},
        "critical_path": {"length_tasks": len(path_ids), "tasks": [g["tasks"][i]["label"] for i in path_ids]},
        "max_fan_in": _extreme([len(t["deps"]) for t in g["tasks"]], g, "deps"),
        "max_fan_out": _extreme([len(u) for u in dependents(g)], g, "dependents"),
    }


def _event(g: dict, n: int) -> dict:
    events = {e["id"]: e for e in g["schedule"].get("events", [])}
    if n not in events:
        raise CliError(f"no event {n}; this graph has {len(events)} events"
                       f"{f' (ids {min(events)}..{max(events)})' if events else ''}")
    return events[n]


def _ref(g: dict, i: int, **extra) -> dict:
    t = g["tasks"][i]
    return {"task": i, "label": t["label"], "worker": t["worker"], **extra}


def task_detail(g: dict, n: int) -> dict:
    if not 0 <= n < len(g["tasks"]):
        raise CliError(f"no task {n}; this graph has tasks 0..{len(g['tasks']) - 1}")
    t = g["tasks"][n]
    layer = next(layer for layer in g["layers"] if layer["id"] == t["layer"])
    queue = g["schedule"]["queues"][t["worker"]]
    wait = None
    if t["wait_event"] is not None:
        e = _event(g, t["wait_event"])
        wait = {"event": e["id"], "trigger_count": e["trigger_count"], "producers": e["producers"]}
    return {
        "id": n, "label": t["label"], "layer": layer["name"], "task_type": layer["task"], "opcode": layer["opcode"],
        "grid_idx": t["grid_idx"], "worker": t["worker"], "queue_position": queue.index(n),
        "wait_event": wait,
        "deps": [_ref(g, d["task"], hazard=d["hazard"]) for d in t["deps"]],
        "dependents": [_ref(g, u["task"], hazard=u["hazard"]) for u in dependents(g)[n]],
        "triggers": [{"event": e, "trigger_count": _event(g, e)["trigger_count"],
                      "consumers": _event(g, e)["consumers"]} for e in t["triggers"]],
        "inputs": t["inputs"], "outputs": t["outputs"],
    }


def event_detail(g: dict, n: int) -> dict:
    e = _event(g, n)
    return {"id": n, "trigger_count": e["trigger_count"],
            "producers": [_ref(g, i) for i in e["producers"]], "consumers": [_ref(g, i) for i in e["consumers"]]}


def _quote(*lines: str) -> str:
    """A DOT string: quotes and backslashes escaped, lines joined by DOT's own line break."""
    return '"' + "\\n".join(s.replace("\\", "\\\\").replace('"', '\\"') for s in lines) + '"'


def dot(g: dict) -> str:
    """Tasks as boxes (label and worker) in one cluster per layer; dependency edges styled by hazard."""
    lines = ["digraph mpk_task_graph {", "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
    for layer in g["layers"]:
        lines.append(f"  subgraph cluster_{layer['id']} {{")
        lines.append(f"    label={_quote(layer['name'] + ' (' + layer['task'] + ')')};")
        for t in g["tasks"]:
            if t["layer"] == layer["id"]:
                label = _quote(t["label"], f"worker {t['worker']}")
                lines.append(f"    t{t['id']} [label={label}];")
        lines.append("  }")
    for t in g["tasks"]:
        for d in t["deps"]:
            lines.append(f"  t{d['task']} -> t{t['id']} [style={HAZARD_STYLE.get(d['hazard'], 'solid')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
