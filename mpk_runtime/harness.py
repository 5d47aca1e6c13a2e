"""The entry points the pytest plugin (pytest_mpk) uses besides the public API. Everything else in
mpk_runtime is private to the runtime; keeping this list short keeps the plugin honest.

    ARCH_NAMES                 the build targets, from the one arch table
    PORTABLE_ARCHS             those whose code runs on every supported GPU (PTX, JIT-compiled)
    native_arch(index)         the arch whose code runs natively on GPU ``index`` ("sm90"...)
    find_reference(...)        a layer's canonical PyTorch reference (reference/<layer>/...)
    read_compile_output(d, r)  a compile output directory, checked (for replays)
    torch_dtype(short)         the torch dtype of a name in a signature ("bf16" -> torch.bfloat16)
    META_TENSOR_NAMES          the meta tensors' names (a scene output of that name is that meta tensor)
    draw_swimlane(csv, png, t) the swimlane picture of a profile CSV
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .archs import ARCHS
from .archs import NAMES as ARCH_NAMES
from .contract import META_TENSORS as META_TENSOR_NAMES

PORTABLE_ARCHS: tuple[str, ...] = tuple(a.name for a in ARCHS.values() if not a.native)


def native_arch(index: int) -> str:
    from .run.gpu import native_arch as arch

    return arch(index).name


def find_reference(function: str, search: list[Path] | None = None, layer: str | None = None) -> Any:
    from .tasks.references import find

    return find(function, search=search, layer=layer)


def read_compile_output(directory: str | Path, rank: int) -> Any:
    from .build.artifacts import read

    return read(directory, rank)


def torch_dtype(short: str) -> Any:
    from .dtypes import from_short

    return from_short(short).torch


def draw_swimlane(csv: str | Path, png: str | Path, title: str) -> None:
    from .profile.stats import read_csv
    from .profile.swimlane import draw

    draw(read_csv(csv), str(png), title)


__all__ = [
    "ARCH_NAMES",
    "META_TENSOR_NAMES",
    "PORTABLE_ARCHS",
    "draw_swimlane",
    "find_reference",
    "native_arch",
    "read_compile_output",
    "torch_dtype",
]
