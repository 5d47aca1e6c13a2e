"""Reading a task graph JSON back into a CompiledGraph, checking every field on the way: a damaged
or hand-edited file gives a GraphError that names the file and the field (``tasks[3].outputs[0].lo``),
never a KeyError or a wrong result later."""

from __future__ import annotations

from typing import Any

from ..errors import GraphError
from .bulk import gc_paused
from .compiled import (
    FORMAT,
    FORMAT_VERSION,
    ArgInfo,
    CompiledGraph,
    EventInfo,
    LayerInfo,
    Scalar,
    ScheduleInfo,
    SliceRef,
    TaskInfo,
    TensorInfo,
    VariantInfo,
)
from .compiled_checks import check_compiled


class _Field:
    """A value at a path of the document, with typed accessors that fail with the path."""

    def __init__(self, value: Any, path: str, where: str):
        self.value, self.path, self.where = value, path, where

    def fail(self, what: str) -> GraphError:
        return GraphError(f"{self.where}: {self.path or 'the document'}: {what}")

    def __getitem__(self, key: str | int) -> _Field:
        path = f"{self.path}[{key}]" if isinstance(key, int) else (f"{self.path}.{key}" if self.path else key)
        if isinstance(key, str):
            if not isinstance(self.value, dict):
                raise self.fail(f"expected an object, got {type(self.value).__name__}")
            if key not in self.value:
                raise GraphError(f"{self.where}: {path}: missing")
        return _Field(self.value[key], path, self.where)

    def get(self, key: str, default: Any) -> _Field:
        if isinstance(self.value, dict) and key not in self.value:
            return _Field(default, f"{self.path}.{key}", self.where)
        return self[key]

    def items(self) -> list[_Field]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list, got {type(self.value).__name__}")
        return [_Field(v, f"{self.path}[{i}]", self.where) for i, v in enumerate(self.value)]

    def as_int(self, lo: int | None = 0, hi: int | None = None) -> int:
        v = self.value
        if not isinstance(v, int) or isinstance(v, bool) or (lo is not None and v < lo) or (hi is not None and v >= hi):
            bound = f" in [{lo}, {hi})" if hi is not None else (f" >= {lo}" if lo is not None else "")
            raise self.fail(f"expected an integer{bound}, got {v!r}")
        return v

    def opt_int(self, lo: int = 0, hi: int | None = None) -> int | None:
        return None if self.value is None else self.as_int(lo, hi)

    def as_str(self) -> str:
        if not isinstance(self.value, str):
            raise self.fail(f"expected a string, got {self.value!r}")
        return self.value

    def opt_str(self) -> str | None:
        return None if self.value is None else self.as_str()

    def ints(self, lo: int | None = 0, hi: int | None = None) -> tuple[int, ...]:
        return tuple(f.as_int(lo, hi) for f in self.items())

    def strs(self) -> tuple[str, ...]:
        return tuple(f.as_str() for f in self.items())

    def as_dict(self) -> dict:
        if not isinstance(self.value, dict):
            raise self.fail(f"expected an object, got {type(self.value).__name__}")
        return dict(self.value)


@gc_paused()
def read_compiled(data: Any, where: str) -> CompiledGraph:
    doc = _Field(data, "", where)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GraphError(
            f'{where}: not a task graph (expected "format": "{FORMAT}", as compile(output_dir=...) '
            f"writes in task_graph_rank{{r}}.json)"
        )
    if data.get("version") != FORMAT_VERSION:
        raise GraphError(
            f"{where}: expected {FORMAT} version {FORMAT_VERSION}, found {FORMAT} version {data.get('version')!r} "
            f"(written by another version of mpk_runtime); recompile to refresh it"
        )
    tensors = tuple(_tensor(f) for f in doc["tensors"].items())
    names = {t.name for t in tensors}
    layers = tuple(_layer(f, i, names) for i, f in enumerate(doc["layers"].items()))
    variants = tuple(_variant(f, i) for i, f in enumerate(doc["variants"].items()))
    sched = doc["schedule"]
    num_workers = sched["num_workers"].as_int(1)
    queues = tuple(q.ints() for q in sched["queues"].items())
    if len(queues) != num_workers:
        raise sched["queues"].fail(f"{len(queues)} queues for num_workers={num_workers}")
    events = tuple(_event(f, i) for i, f in enumerate(sched["events"].items()))
    counts = (len(layers), len(variants), num_workers, len(events))
    tasks = tuple(
        _task_fast(f.value, i, *counts, names) or _task(f, i, *counts, names) for i, f in enumerate(doc["tasks"].items())
    )
    n = len(tasks)
    queued = sorted(t for q in queues for t in q)
    if queued != list(range(n)):
        raise sched["queues"].fail(f"the queues must hold every task 0..{n - 1} exactly once")
    for w, q in enumerate(queues):
        for tid in q:
            if tasks[tid].worker != w:
                raise doc["tasks"][tid]["worker"].fail(f"{tasks[tid].worker}, but the task is queued on worker {w}")
    for i, e in enumerate(events):
        bad = [p for p in e.producers + e.consumers if p >= n]
        if bad:
            raise sched["events"][i].fail(f"names tasks {bad} that do not exist")
    for t in tasks:
        bad = [d for d, _ in t.deps if d >= t.id]
        if bad:
            raise doc["tasks"][t.id]["deps"].fail(f"depends on tasks {bad}, which do not come before it")
    end = sched.get("end_of_task_graph", {}).get("trigger_count", sum(1 for q in queues if q)).as_int(0)
    schedule = ScheduleInfo(sched.get("policy", "locality").as_str(), num_workers, queues, end, events)
    graph = CompiledGraph(
        doc.get("arch", "sm90").as_str(), doc.get("rank", 0).as_int(), tensors, layers, variants, tasks, schedule
    )
    check_compiled(graph, where)
    return graph


def _tensor(f: _Field) -> TensorInfo:
    direction = f["direction"].as_str()
    if direction not in ("IN", "OUT", "INOUT"):
        raise f["direction"].fail(f"expected IN, OUT or INOUT, got {direction!r}")
    return TensorInfo(f["name"].as_str(), f["shape"].ints(1), f["dtype"].as_str(), f.get("kind", "attached").as_str(), direction)


def _layer(f: _Field, index: int, tensors: set[str]) -> LayerInfo:
    if f["id"].as_int() != index:
        raise f["id"].fail(f"layer ids must be 0, 1, ... in order; expected {index}")
    grid = f["grid"].ints(1)
    if len(grid) != 3:
        raise f["grid"].fail(f"expected three integers, got {list(grid)}")
    scalars = []
    for s in f["scalars"].items():
        v = s.as_dict()
        if "i" in v:
            scalars.append(Scalar(s["i"].as_int(None), True))
        elif "f" in v and isinstance(v["f"], (int, float)):
            scalars.append(Scalar(float(v["f"]), False))
        else:
            raise s.fail(f'expected {{"i": int}} or {{"f": float}}, got {v!r}')
    args = []
    for a in f["args"].items():
        tensor = a["tensor"].as_str()
        if tensor not in tensors:
            raise a["tensor"].fail(f"names tensor {tensor!r}, which the graph does not list")
        args.append(ArgInfo(a["name"].as_str(), tensor, a.get("partition", "").as_str(), a["direction"].as_str()))
    return LayerInfo(
        index,
        f["name"].as_str(),
        f["task"].as_str(),
        f["opcode"].as_int(),
        (grid[0], grid[1], grid[2]),
        f.get("values", {}).as_dict(),
        f.get("template_args", []).strs(),
        tuple(scalars),
        f["first_task"].as_int(),
        f["num_tasks"].as_int(),
        tuple(args),
    )


def _variant(f: _Field, index: int) -> VariantInfo:
    if f["id"].as_int() != index:
        raise f["id"].fail(f"variant ids must be 0, 1, ... in order; expected {index}")
    return VariantInfo(index, f["task"].as_str(), f["call"].as_str(), f.get("smem", None).opt_str(), f.get("layers", []).strs())


def _slice(f: _Field, tensors: set[str]) -> SliceRef:
    tensor = f["tensor"].as_str()
    if tensor not in tensors:
        raise f["tensor"].fail(f"names tensor {tensor!r}, which the graph does not list")
    lo, hi = f["lo"].ints(), f["hi"].ints()
    if len(lo) != len(hi) or any(b < a for a, b in zip(lo, hi)):
        raise f.fail(f"lo={list(lo)} and hi={list(hi)} are not a box")
    return SliceRef(tensor, lo, hi, f["byte_offset"].as_int())


def _task(
    f: _Field, index: int, num_layers: int, num_variants: int, num_workers: int, num_events: int, tensors: set[str]
) -> TaskInfo:
    if f["id"].as_int() != index:
        raise f["id"].fail(f"task ids must be 0, 1, ... in order; expected {index}")
    grid_idx = f["grid_idx"].ints()
    if len(grid_idx) != 3:
        raise f["grid_idx"].fail(f"expected three integers, got {list(grid_idx)}")
    deps = []
    for d in f["deps"].items():
        hazard = d["hazard"].as_str()
        if hazard not in ("raw", "war", "waw"):
            raise d["hazard"].fail(f"expected raw, war or waw, got {hazard!r}")
        deps.append((d["task"].as_int(), hazard))
    return TaskInfo(
        index,
        f["label"].as_str(),
        f["layer"].as_int(0, num_layers),
        f["variant"].as_int(0, num_variants),
        (grid_idx[0], grid_idx[1], grid_idx[2]),
        tuple(_slice(s, tensors) for s in f["inputs"].items()),
        tuple(_slice(s, tensors) for s in f["outputs"].items()),
        tuple(deps),
        f["worker"].as_int(0, num_workers),
        f["wait_event"].opt_int(0, num_events),
        f["triggers"].ints(0, num_events),
    )


_HAZARDS = ("raw", "war", "waw")


def _nat(v: Any, hi: int | None = None) -> bool:
    return type(v) is int and v >= 0 and (hi is None or v < hi)


def _task_fast(
    d: Any, index: int, num_layers: int, num_variants: int, num_workers: int, num_events: int, tensors: set[str]
) -> TaskInfo | None:
    """The task of a well-formed line, checked as _task checks it, without the per-field wrappers
    (a graph has tens of thousands of lines); None at the first doubt, and _task says what is wrong."""
    try:
        grid, wait = d["grid_idx"], d["wait_event"]
        slices = []
        for side in (d["inputs"], d["outputs"]):
            refs = []
            for s in side:
                lo, hi = tuple(s["lo"]), tuple(s["hi"])
                ok = s["tensor"] in tensors and len(lo) == len(hi) and _nat(s["byte_offset"])
                if not (ok and all(_nat(a) and _nat(b) and a <= b for a, b in zip(lo, hi))):
                    return None
                refs.append(SliceRef(s["tensor"], lo, hi, s["byte_offset"]))
            slices.append(tuple(refs))
        deps = tuple((x["task"], x["hazard"]) for x in d["deps"])
        triggers = tuple(d["triggers"])
        ok = (
            d["id"] == index
            and type(d["label"]) is str
            and _nat(d["layer"], num_layers)
            and _nat(d["variant"], num_variants)
            and _nat(d["worker"], num_workers)
            and (wait is None or _nat(wait, num_events))
            and len(grid) == 3
            and all(_nat(g) for g in grid)
            and all(_nat(t) and h in _HAZARDS for t, h in deps)
            and all(_nat(e, num_events) for e in triggers)
        )
    except (TypeError, KeyError, AttributeError):
        return None
    if not ok or type(d["id"]) is not int:
        return None
    (gx, gy, gz), (ins, outs) = grid, slices
    return TaskInfo(index, d["label"], d["layer"], d["variant"], (gx, gy, gz), ins, outs, deps, d["worker"], wait, triggers)


def _event(f: _Field, index: int) -> EventInfo:
    if f["id"].as_int() != index:
        raise f["id"].fail(f"event ids must be 0, 1, ... in order; expected {index}")
    return EventInfo(index, f["trigger_count"].as_int(1), f["producers"].ints(), f.get("consumers", []).ints())
