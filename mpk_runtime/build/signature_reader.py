"""Reading ``signature_rank{r}.json`` back, every field checked (see graph/compiled_reader.py)."""

from __future__ import annotations

from typing import Any

from ..errors import GraphError
from ..graph.compiled_reader import _Field
from .artifacts import SIGNATURE_PARAMS, Signature, SignatureTensor


def read_signature(data: Any, where: str) -> Signature:
    doc = _Field(data, "", where)
    params = doc["params"].as_dict()
    missing = [k for k in SIGNATURE_PARAMS if k not in params]
    if missing:
        raise doc["params"].fail(f"lacks {', '.join(missing)}")
    tensors = []
    names: set[str] = set()
    for f in doc["tensors"].items():
        name = f["name"].as_str()
        if name in names:
            raise f["name"].fail(f"tensor {name!r} is listed twice")
        names.add(name)
        direction = f["direction"].as_str()
        if direction not in ("IN", "OUT", "INOUT"):
            raise f["direction"].fail(f"expected IN, OUT or INOUT, got {direction!r}")
        derived = f.get("derived_from", None).value
        if derived is not None and not isinstance(derived, dict):
            raise f["derived_from"].fail(f"expected an object, got {derived!r}")
        tensors.append(
            SignatureTensor(name, f["shape"].ints(1), f["dtype"].as_str(), direction, f.get("kind", "attached").as_str(), derived)
        )
    arch = doc["arch"].as_str()
    return Signature(arch, doc.get("rank", 0).as_int(), params, tuple(tensors))


def check_against_graph(signature: Signature, graph: Any, where: str) -> None:
    """The signature and the graph of one directory must describe the same tensors."""
    by_name = {t.name: t for t in signature.tensors}
    for t in graph.tensors:
        s = by_name.get(t.name)
        if s is None:
            raise GraphError(f"{where}: the task graph uses tensor {t.name!r}, which the signature does not list")
        if tuple(s.shape) != tuple(t.shape) or s.dtype != t.dtype:
            raise GraphError(
                f"{where}: tensor {t.name!r} is {s.dtype} {list(s.shape)} in the signature but "
                f"{t.dtype} {list(t.shape)} in the task graph; the directory is inconsistent (recompile it)"
            )
    if signature.arch != graph.arch:
        raise GraphError(f"{where}: the signature is for {signature.arch}, the task graph for {graph.arch}")
