"""What ``compile(output_dir=...)`` writes, so a build can be inspected and replayed later:

- ``test_rank{r}.cu``: the generated translation unit;
- ``task_graph_rank{r}.json``: tensors, layers, variants, every task (slices, dependencies, worker,
  event, triggers) and the schedule;
- ``signature_rank{r}.json``: every attached tensor (name, shape, dtype, IN / OUT / INOUT) and the
  kernel parameters, enough to rebuild inputs for a replay;
- ``meta_rank{r}.pt``: the meta tensors the user overrode (CPU copies), when there are any.

``PersistentKernel.from_artifacts`` reads them back.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .build import write_if_changed
from .codegen import Variant
from .errors import GraphError
from .graph import TaskGraph
from .params import KernelParams
from .schedule import Schedule

FORMAT_VERSION = 1


def graph_json(graph: TaskGraph, schedule: Schedule, variants: list[Variant], variant_of_layer: dict[int, int],
               arch: str, p: KernelParams) -> dict:
    data = {"format": "mpk-task-graph", "version": FORMAT_VERSION, "arch": arch, "rank": p.mpi_rank}
    data.update(graph.to_json())
    data["variants"] = [{"id": v.id, "task": v.spec.name, "call": v.call, "smem": v.smem, "layers": v.layers}
                        for v in variants]
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
            {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.short, "direction": t.direction, "kind": t.kind,
             **({"derived_from": t.derived_from} if t.derived_from else {})}
            for t in graph.tensors.values()
        ],
    }


def paths(output_dir: str | Path, rank: int) -> dict[str, Path]:
    out = Path(output_dir)
    return {
        "source": out / f"test_rank{rank}.cu",
        "graph": out / f"task_graph_rank{rank}.json",
        "signature": out / f"signature_rank{rank}.json",
        "meta": out / f"meta_rank{rank}.pt",
    }


def write(output_dir: str | Path, rank: int, source: str, graph: dict, signature: dict,
          meta_overrides: dict[str, torch.Tensor]) -> dict[str, Path]:
    where = paths(output_dir, rank)
    write_if_changed(where["source"], source)
    write_if_changed(where["graph"], dumps(graph))
    write_if_changed(where["signature"], dumps(signature))
    if meta_overrides:
        torch.save({k: v.detach().cpu() for k, v in meta_overrides.items()}, where["meta"])
    else:
        where.pop("meta")
    return where


def read(output_dir: str | Path, rank: int) -> tuple[str, dict, dict, dict[str, torch.Tensor]]:
    """(source, graph, signature, meta overrides) of a compile output directory."""
    where = paths(output_dir, rank)
    missing = [str(p) for k, p in where.items() if k != "meta" and not p.is_file()]
    if missing:
        raise GraphError(
            f"{output_dir} is not a compile output directory of rank {rank}: missing {', '.join(missing)} "
            f"(write one with pk.compile(output_dir=...))"
        )
    graph = json.loads(where["graph"].read_text())
    signature = json.loads(where["signature"].read_text())
    for data, kind in ((graph, "mpk-task-graph"), (signature, "mpk-signature")):
        if data.get("format") != kind or data.get("version") != FORMAT_VERSION:
            raise GraphError(f"{output_dir}: expected {kind} version {FORMAT_VERSION}, found {data.get('format')} "
                             f"version {data.get('version')}; recompile to refresh the directory")
    meta = torch.load(where["meta"]) if where["meta"].is_file() else {}
    return where["source"].read_text(), graph, signature, meta


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
