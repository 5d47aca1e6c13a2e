"""Reading ``signature_rank{r}.json`` back, every field checked (see graph/compiled_reader.py), and
checking it against the task graph of the same directory: a replay allocates, binds and compares
by the signature and runs the graph, so the two must describe the same tensors and kernel."""

from __future__ import annotations

import math
from typing import Any

from .. import archs, dtypes
from ..errors import GraphError
from ..graph.compiled import CompiledGraph
from ..graph.compiled_checks import KINDS
from ..graph.compiled_reader import _Field
from ..graph.tensor_maps import SWIZZLES
from .artifacts import SIGNATURE_PARAMS, Signature, SignatureTensor

# The JSON type of each recorded parameter (PersistentKernel checks the values when it is built).
_PARAM_TYPES = {name: int for name in SIGNATURE_PARAMS} | {
    "mode": str,
    "placement": str,
    "test_mode": bool,
    "watchdog_timeout": float,
}


def read_signature(data: Any, where: str) -> Signature:
    doc = _Field(data, "", where)
    params = doc["params"].as_dict()
    for name in SIGNATURE_PARAMS:
        _param(doc["params"][name], _PARAM_TYPES[name])
    unknown = sorted(set(params) - set(SIGNATURE_PARAMS))
    if unknown:
        raise doc["params"].fail(f"{', '.join(unknown)}: not parameters a signature records ({', '.join(SIGNATURE_PARAMS)})")
    arch = doc["arch"].as_str()
    if arch not in archs.NAMES:
        raise doc["arch"].fail(f"unknown arch {arch!r}; expected one of {', '.join(archs.NAMES)}")
    tensors = []
    names: set[str] = set()
    for f in doc["tensors"].items():
        name = f["name"].as_str()
        if not name or name in names:
            raise f["name"].fail(f"tensor {name!r} is listed twice" if name else "a tensor needs a name")
        names.add(name)
        direction = f["direction"].as_str()
        if direction not in ("IN", "OUT", "INOUT"):
            raise f["direction"].fail(f"expected IN, OUT or INOUT, got {direction!r}")
        dtype = f["dtype"].as_str()
        if dtype not in dtypes.SHORT_NAMES:
            raise f["dtype"].fail(f"unknown dtype {dtype!r}; expected one of {', '.join(dtypes.SHORT_NAMES)}")
        kind = f.get("kind", "attached").as_str()
        if kind not in KINDS:
            raise f["kind"].fail(f"expected one of {', '.join(KINDS)}, got {kind!r}")
        shape = f["shape"].ints(1)
        if not shape:
            raise f["shape"].fail("a tensor has at least one dimension")
        derived = _derived(f, kind, shape)
        tensors.append(SignatureTensor(name, shape, dtype, direction, kind, derived))
    for f, t in zip(doc["tensors"].items(), tensors):
        missing = [i for i in (t.derived_from or {}).get("inputs", ()) if i not in names]
        if missing:
            raise f["derived_from"]["inputs"].fail(f"names {missing}, which the signature does not list")
    return Signature(arch, doc.get("rank", 0).as_int(), params, tuple(tensors))


def _param(f: _Field, kind: type) -> None:
    v = f.value
    if kind is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    else:
        ok = isinstance(v, kind) and (kind is bool or not isinstance(v, bool))
    if not ok:
        want = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}[kind]
        raise f.fail(f"expected {want}, got {v!r}")


def _derived(f: _Field, kind: str, shape: tuple[int, ...]) -> dict | None:
    """A derived tensor's recipe: {"op": "shuffle_tensors", "inputs": [...], "shuffled_dim": d, "num_groups": g}
    or {"op": "tensor_maps", "inputs": [...], "box": [...], "swizzle": bytes}."""
    if f.get("derived_from", None).value is None:
        if kind == "derived":
            raise f.fail("a derived tensor needs derived_from (how to recompute it)")
        return None
    d = f["derived_from"]
    recipe = d.as_dict()
    op = d["op"].as_str()
    if op not in ("shuffle_tensors", "tensor_maps"):
        raise d["op"].fail(f"unknown op {recipe['op']!r}; expected 'shuffle_tensors' or 'tensor_maps'")
    if not d["inputs"].strs():
        raise d["inputs"].fail("names no tensor")
    if op == "tensor_maps":
        if not d["box"].ints(1, 256):
            raise d["box"].fail("gives no dims")
        if d["swizzle"].as_int(0) not in SWIZZLES:
            raise d["swizzle"].fail(f"must be one of {sorted(SWIZZLES)} (bytes)")
        return recipe
    d["shuffled_dim"].as_int(0, len(shape))
    d["num_groups"].as_int(1)
    return recipe


def check_against_graph(signature: Signature, graph: CompiledGraph, where: str) -> None:
    """The signature and the graph of one directory must describe the same tensors, arch, rank and
    worker count; GraphError naming the directory and the difference otherwise."""

    def fail(what: str) -> GraphError:
        return GraphError(f"{where}: {what}; the directory is inconsistent (recompile it)")

    in_graph = {t.name: t for t in graph.tensors}
    for s in signature.tensors:
        t = in_graph.get(s.name)
        if t is None:
            raise fail(f"the signature lists tensor {s.name!r}, which the task graph does not have")
        if tuple(s.shape) != tuple(t.shape) or s.dtype != t.dtype:
            raise fail(
                f"tensor {s.name!r} is {s.dtype} {list(s.shape)} in the signature but {t.dtype} {list(t.shape)} in the task graph"
            )
        if (s.direction, s.kind) != (t.direction, t.kind):
            raise fail(
                f"tensor {s.name!r} is {s.direction} {s.kind} in the signature but {t.direction} {t.kind} in the task graph"
            )
    listed = {s.name for s in signature.tensors}
    for t in graph.tensors:
        if t.name not in listed:
            raise fail(f"the task graph uses tensor {t.name!r}, which the signature does not list")
    if signature.arch != graph.arch:
        raise fail(f"the signature is for {signature.arch}, the task graph for {graph.arch}")
    if signature.rank != graph.rank:
        raise fail(f"the signature is of rank {signature.rank}, the task graph of rank {graph.rank}")
    workers = signature.params["num_workers"]
    if workers != graph.schedule.num_workers:
        raise fail(f"the signature says num_workers={workers}, the task graph is scheduled on {graph.schedule.num_workers}")
