"""What ``compile(output_dir=...)`` writes, so a build can be inspected and replayed later:

- ``test_rank{r}.cu``: the generated translation unit;
- ``task_graph_rank{r}.json``: tensors, layers, variants, every task (slices, dependencies, worker,
  event, triggers) and the schedule;
- ``signature_rank{r}.json``: every attached tensor (name, shape, dtype, IN / OUT / INOUT) and the
  kernel parameters, enough to rebuild inputs for a replay.
"""

from __future__ import annotations

import json
from pathlib import Path

from .build import write_if_changed
from .codegen import Variant
from .graph import TaskGraph
from .params import KernelParams
from .schedule import Schedule

FORMAT_VERSION = 1


def graph_json(graph: TaskGraph, schedule: Schedule, variants: list[Variant], variant_of_layer: dict[int, int],
               arch: str, p: KernelParams) -> dict:
    data = {"format": "mpk-task-graph", "version": FORMAT_VERSION, "arch": arch, "rank": p.mpi_rank}
    data.update(graph.to_json())
    data["variants"] = [{"id": v.id, "task": v.spec.name, "call": v.call, "layers": v.layers} for v in variants]
    data["tasks"] = [
        {"id": t.id, "label": t.label, "layer": t.layer.id, "variant": variant_of_layer[t.layer.id],
         "grid_idx": list(t.grid_idx), "inputs": [s.to_json() for s in t.reads],
         "outputs": [s.to_json() for s in t.writes],
         "deps": [{"task": d, "hazard": k} for d, k in sorted(t.deps.items())],
         "worker": schedule.worker_of[t.id], "wait_event": schedule.wait_event[t.id],
         "triggers": schedule.triggers[t.id]}
        for t in graph.tasks
    ]
    data["schedule"] = schedule.to_json()
    return data


def signature_json(graph: TaskGraph, p: KernelParams, arch: str) -> dict:
    params = {k: getattr(p, k) for k in (
        "mode", "world_size", "mpi_rank", "num_workers", "num_local_schedulers", "max_num_batched_tokens",
        "max_num_batched_requests", "max_num_pages", "page_size", "max_seq_length", "eos_token_id", "test_mode",
        "placement", "watchdog_timeout")}
    return {
        "format": "mpk-signature", "version": FORMAT_VERSION, "arch": arch, "rank": p.mpi_rank, "params": params,
        "tensors": [
            {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.short, "direction": t.direction, "kind": t.kind}
            for t in graph.tensors.values()
        ],
    }


def write(output_dir: str | Path, rank: int, source: str, graph: dict, signature: dict) -> dict[str, Path]:
    out = Path(output_dir)
    paths = {
        "source": out / f"test_rank{rank}.cu",
        "graph": out / f"task_graph_rank{rank}.json",
        "signature": out / f"signature_rank{rank}.json",
    }
    write_if_changed(paths["source"], source)
    write_if_changed(paths["graph"], dumps(graph))
    write_if_changed(paths["signature"], dumps(signature))
    return paths


def dumps(data: dict) -> str:
    """JSON with one line per top-level key, and one line per element of a top-level list (one
    task per line: greppable, diffable, and still plain JSON)."""
    parts = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(v, separators=(",", ":")) for v in value)
            parts.append(f"{json.dumps(key)}: [\n  {items}\n ]")
        else:
            parts.append(f"{json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}")
    return "{\n " + ",\n ".join(parts) + "\n}\n"
