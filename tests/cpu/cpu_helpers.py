"""Builders shared by the CPU tests: RMSNorm tensors on a kernel, and task graphs made straight on
``mpk_runtime.graph.TaskGraph`` (no kernel, no nvcc) for graph, schedule and codegen tests; the
target a cubin (a device-only build) was assembled for; a bench script loaded as a module."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import torch

import mpk_runtime as mpk
from mpk_runtime.build.cache_fs import link_or_copy
from mpk_runtime.graph import CompiledGraph, DTensor, Layer, TaskGraph, build_compiled, build_schedule, collect_variants
from mpk_runtime.tasks import registry

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str):
    """bench/<name>.py as a module, with bench/ on sys.path while it loads (a bench imports its
    neighbours, timing.py and layer_bench.py)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def rmsnorm_tensors(
    pk: mpk.PersistentKernel, batch: int = 16, hidden: int = 4096, dtype: torch.dtype = torch.bfloat16
) -> tuple[DTensor, DTensor, DTensor]:
    """Attach the input, weight and output of a (batch, hidden) RMSNorm to ``pk``."""
    x = pk.attach_input(torch.zeros(batch, hidden, dtype=dtype), name="x")
    w = pk.attach_input(torch.ones(hidden, dtype=dtype), name="w")
    y = pk.attach_input(torch.zeros(batch, hidden, dtype=dtype), name="y")
    return x, w, y


class GraphBuilder:
    """A TaskGraph grown layer by layer: ``g.noop([a], [b], width=4)``, ``g.rmsnorm(x, w, y, grid=16)``,
    ``g.linear(x, w, y, grid=4)``."""

    def __init__(self) -> None:
        self.graph = TaskGraph()

    def tensor(self, name: str, rows: int = 8, cols: int | None = None, dtype: torch.dtype = torch.int32) -> DTensor:
        shape = (rows,) if cols is None else (rows, cols)
        return self.graph.add_tensor(torch.zeros(shape, dtype=dtype), name, "attached")

    def noop(self, inputs: list[DTensor], outputs: list[DTensor], width: int = 1, probe: bool = False) -> Layer:
        return self._layer("noop", {"inputs": inputs, "outputs": outputs, "probe": probe}, width)

    def rmsnorm(self, x: DTensor, w: DTensor, y: DTensor, grid: int = 1, eps: float = 1e-6) -> Layer:
        return self._layer("rmsnorm", {"input": x, "weight": w, "output": y, "eps": eps}, grid)

    def linear(self, x: DTensor, w: DTensor, y: DTensor, grid: int = 1) -> Layer:
        return self._layer("linear", {"input": x, "weight": w, "output": y}, grid)

    def tasks_of(self, layer: Layer) -> list[int]:
        return list(range(layer.first_task, layer.first_task + layer.num_tasks))

    def _layer(self, task: str, kwargs: dict, width: int) -> Layer:
        spec = registry.get(task)
        args, values = spec.bind(kwargs)
        return self.graph.add_layer(spec, (width, 1, 1), args, values)


def compile_graph(
    graph: TaskGraph, workers: int = 2, placement: str = "round_robin", arch: str = "sm80", rank: int = 0
) -> CompiledGraph:
    """The compiled graph of ``graph`` (scheduled on ``workers`` with ``placement``), as compile() makes it."""
    variants, of_layer = collect_variants(graph)
    return build_compiled(graph, build_schedule(graph, workers, placement), variants, of_layer, arch, rank)


def graph_of(pk: mpk.PersistentKernel) -> TaskGraph:
    """The kernel's task graph, before compile() (white box: the one place that knows where it is)."""
    return pk._graph


def cubin_sm(path: Path) -> int:
    """The SM number the cubin at ``path`` was assembled for (90 for sm_90a), from its ELF header,
    after checking that it is a 64-bit ELF file for CUDA (e_machine EM_CUDA, 190). The number sits in
    e_flags: in the low byte up to ELF ABI version 7, in bits 8-15 from version 8 on, which nvcc 13
    writes for every arch (LLVM's BinaryFormat/ELF.h: EF_CUDA_SM, EF_CUDA_SM_MASK)."""
    header = path.read_bytes()[:64]
    assert header[:5] == b"\x7fELF\x02", f"{path} is not a 64-bit ELF file"
    (machine,) = struct.unpack_from("<H", header, 18)
    assert machine == 190, f"{path} is an ELF file for machine {machine}, not CUDA (190)"
    (flags,) = struct.unpack_from("<I", header, 48)
    return (flags >> 8) & 0xFF if header[8] >= 8 else flags & 0xFF


def race_for_module(source: str, barrier, results) -> None:
    """One process of a build race (a new process imports it from here, a module on sys.path):
    wait for all, ask for the module (a cubin: any kind of build would do), read it, report."""
    import os

    from mpk_runtime.build import cache

    barrier.wait(timeout=120)
    result = cache.build_module(source, "sm80", "race", device_only=True)
    assert cubin_sm(result.path) == 80
    results.put((result.cached, str(result.path), os.getpid()))


def fixed_copy(prefix: str, relative: str, text: str) -> Path:
    """``text`` written at <tmp>/<prefix>-<its digest>/<relative>: the same path in every run for the
    same content, so a host build that names its headers' paths finds a later run's module in the
    cache. Written whole (a rename), for a test in another worker reading it meanwhile."""
    digest = hashlib.sha256(f"{relative}\0{text}".encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"{prefix}-{digest}" / relative
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def patched_copy(source: Path, prefix: str, old: str = "", new: str = "", relative: str | None = None) -> Path:
    """``source`` with ``old`` (which must occur once) replaced by ``new``, written by ``fixed_copy`` at
    ``relative`` (default: the file's name) under a directory named for the content."""
    text = source.read_text()
    if old:
        assert text.count(old) == 1, f"{source} no longer holds {old!r}; update this test"
        text = text.replace(old, new)
    return fixed_copy(prefix, relative or source.name, text)


def cache_without_modules(root: Path, shared: Path) -> Path:
    """A build cache at ``root`` that holds what every emulated run shares (the emulator's runtime,
    the precompiled shim, the scheduler's check), linked from the session's cache ``shared``, and no
    module: cold for the cases of a run, without a minute of building what they all need."""
    (root / "modules").mkdir(parents=True)
    for entry in (shared / "modules").iterdir():
        if entry.name.startswith(("emulation-", "scheduler-check-")) and entry.is_dir():
            shutil.copytree(entry, root / "modules" / entry.name, copy_function=link_or_copy)
    return root
