"""Compile output directories: what ``compile(output_dir=...)`` writes, so that a build can be
inspected and replayed later, and the typed reading of it back.

- ``test_rank{r}.cu``: the generated translation unit;
- ``task_graph_rank{r}.json``: the compiled graph (graph/compiled.py);
- ``signature_rank{r}.json``: every attached tensor (name, shape, dtype, IN / OUT / INOUT, how a
  derived one is computed) and the kernel parameters, enough to rebuild inputs for a replay;
- ``meta_rank{r}.pt``: the meta tensors the user overrode (CPU copies), when there are any.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, GraphError
from ..graph.compiled import FORMAT_VERSION, CompiledGraph
from ..graph.compiled_writer import dumps, graph_text

SIGNATURE_FORMAT = "mpk-signature"
# The init parameters a signature records: what a replay needs to rebuild the same kernel.
SIGNATURE_PARAMS = (
    "mode",
    "world_size",
    "mpi_rank",
    "num_workers",
    "num_local_schedulers",
    "max_num_batched_tokens",
    "max_num_batched_requests",
    "max_num_pages",
    "page_size",
    "max_seq_length",
    "eos_token_id",
    "test_mode",
    "placement",
    "watchdog_timeout",
)


@dataclass(frozen=True)
class SignatureTensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    direction: str  # IN, OUT or INOUT
    kind: str  # attached, intermediate or derived
    derived_from: dict | None = None  # {"op": "shuffle_tensors", "inputs": [...], ...}


@dataclass(frozen=True)
class Signature:
    arch: str
    rank: int
    params: dict[str, Any]
    tensors: tuple[SignatureTensor, ...]

    def to_json(self) -> dict:
        return {
            "format": SIGNATURE_FORMAT,
            "version": FORMAT_VERSION,
            "arch": self.arch,
            "rank": self.rank,
            "params": self.params,
            "tensors": [
                {
                    "name": t.name,
                    "shape": list(t.shape),
                    "dtype": t.dtype,
                    "direction": t.direction,
                    "kind": t.kind,
                    **({"derived_from": t.derived_from} if t.derived_from else {}),
                }
                for t in self.tensors
            ],
        }

    @classmethod
    def of(cls, graph: CompiledGraph, derived: dict[str, dict], params: Any) -> Signature:
        """The signature of a compiled graph: its tensors, how the derived ones were made
        (``derived``: name -> recipe), and the SIGNATURE_PARAMS of ``params`` (attributes)."""
        tensors = tuple(
            SignatureTensor(t.name, t.shape, t.dtype, t.direction, t.kind, derived.get(t.name)) for t in graph.tensors
        )
        return cls(graph.arch, graph.rank, {k: getattr(params, k) for k in SIGNATURE_PARAMS}, tensors)

    @classmethod
    def from_json(cls, data: Any, where: str) -> Signature:
        from .signature_reader import read_signature

        return read_signature(data, where)


@dataclass
class CompileOutput:
    """A compile output directory, read back."""

    directory: Path
    source: str
    graph: CompiledGraph
    signature: Signature
    meta: dict[str, torch.Tensor] = field(default_factory=dict)
    edited: str | None = None  # how the source differs from the one the graph generates (replay.plan)


def paths(output_dir: str | Path, rank: int) -> dict[str, Path]:
    out = Path(output_dir)
    return {
        "source": out / f"test_rank{rank}.cu",
        "graph": out / f"task_graph_rank{rank}.json",
        "signature": out / f"signature_rank{rank}.json",
        "meta": out / f"meta_rank{rank}.pt",
    }


def write(
    output_dir: str | Path,
    rank: int,
    source: str,
    graph: CompiledGraph,
    signature: Signature,
    meta_overrides: dict[str, torch.Tensor],
) -> dict[str, Path]:
    where = paths(output_dir, rank)
    write_if_changed(where["source"], source)
    write_if_changed(where["graph"], graph_text(graph))
    write_if_changed(where["signature"], dumps(signature.to_json()))
    if meta_overrides:
        torch.save({k: v.detach().cpu() for k, v in meta_overrides.items()}, where["meta"])
    else:
        where.pop("meta")
    return where


def read(output_dir: str | Path, rank: int) -> CompileOutput:
    """A compile output directory, every file checked; GraphError naming the file and field otherwise."""
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise ConfigError(f"rank={rank!r} must be an integer >= 0: the rank whose files (test_rank{{r}}.cu, ...) to read")
    if not isinstance(output_dir, (str, os.PathLike)):
        raise ConfigError(f"output_dir={output_dir!r} must be the path of a compile output directory (compile(output_dir=...))")
    where = paths(output_dir, rank)
    if not Path(output_dir).is_dir():
        what = "does not exist" if not Path(output_dir).exists() else "is not a directory"
        raise GraphError(f"{output_dir} {what}; a replay needs a compile output directory (pk.compile(output_dir=...))")
    missing = [str(p) for k, p in where.items() if k != "meta" and not p.is_file()]
    if missing:
        raise GraphError(
            f"{output_dir} is not a compile output directory of rank {rank}: missing {', '.join(missing)} "
            f"(write one with pk.compile(output_dir=...))"
        )
    graph_doc = _load_json(where["graph"])
    signature_doc = _load_json(where["signature"])
    graph = CompiledGraph.from_json(graph_doc, str(where["graph"]))  # checks its format and version too
    doc = signature_doc
    if not isinstance(doc, dict) or doc.get("format") != SIGNATURE_FORMAT or doc.get("version") != FORMAT_VERSION:
        found = (doc.get("format"), doc.get("version")) if isinstance(doc, dict) else (type(doc).__name__, None)
        raise GraphError(
            f"{where['signature']}: expected {SIGNATURE_FORMAT} version {FORMAT_VERSION}, found {found[0]} version "
            f"{found[1]}; recompile to refresh the directory"
        )
    signature = Signature.from_json(signature_doc, str(where["signature"]))
    from .signature_reader import check_against_graph

    check_against_graph(signature, graph, str(output_dir))
    meta = _load_meta(where["meta"]) if os.path.lexists(where["meta"]) else {}
    try:
        source = where["source"].read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise GraphError(f"{where['source']}: cannot be read: {e}") from None
    return CompileOutput(Path(output_dir), source, graph, signature, meta)


def _load_meta(path: Path) -> dict[str, torch.Tensor]:
    """The saved meta tensor overrides (names and tensors; PersistentKernel checks their shapes)."""
    try:
        meta = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch.load raises many kinds for a damaged file
        first = (str(e).splitlines() or ["no message"])[0][:200]
        raise GraphError(f"{path}: cannot be loaded ({type(e).__name__}: {first}); recompile to refresh it") from None
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in meta.items()):
        raise GraphError(f"{path}: expected a dict of meta tensor name -> tensor, got {type(meta).__name__}")
    return meta


def signature_arch(path: Path) -> str:
    """The arch a signature file names, read with the checks of its JSON and format only."""
    data = _load_json(path)
    if not isinstance(data, dict) or data.get("format") != SIGNATURE_FORMAT:
        raise GraphError(f'{path}: not a signature file (expected "format": "{SIGNATURE_FORMAT}")')
    from .signature_reader import read_signature

    return read_signature(data, str(path)).arch


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise GraphError(f"{path}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise GraphError(f"{path}: cannot be read: {e}") from None
    except (ValueError, RecursionError) as e:  # nested too deeply, an integer of thousands of digits
        raise GraphError(f"{path}: not ours ({type(e).__name__}: {str(e)[:80]}); recompile to refresh the directory") from None


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file already holds it (keeps timestamps, and editors, calm)."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True
