"""What ``PersistentKernel.compile()`` does: the declared task graph (or a replayed directory's) is
lowered to its source, compiled graph and signature, built (or found in the cache), written out
when asked, given its communication memory, and handed to the runner of its backend. Enters: the
kernel's graph and settings; leaves: a ``Compiled`` (the runner, the builds, the files written).

Only the GPU backend loads the nvcc build, so only it gets the full one (a shared library with the
host side); the emulated and compile-only backends get the device code alone (an unoptimized
cubin), which checks that the task bodies compile for the arch at a fraction of the cost
(build/nvcc.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..build import artifacts, replay
from ..build.cache import BuildResult, build_module
from ..codegen import dispatcher
from ..graph import CompiledGraph, TaskGraph
from ..run.launcher import Module
from ..run.start import RunInputs, Runner, start_runner
from . import comm
from .lowering import lower


@dataclass
class Compiled:
    graph: CompiledGraph
    build_result: BuildResult  # off the GPU, a device-only build (a cubin)
    runner: Runner | None  # None: compile-only
    host_build_result: BuildResult | None  # the host build of the emulator of CUDA bodies
    artifacts: dict[str, Path] = field(default_factory=dict)  # compile(output_dir=...)'s files


@dataclass
class KernelState:
    """What compile() reads of a PersistentKernel."""

    graph: TaskGraph
    params: Any  # KernelParams
    arch: str
    backend: str
    device: torch.device
    meta_tensors: dict[str, torch.Tensor]
    batch: Any  # BatchConfig at construction
    worker_threads: int
    profiler: torch.Tensor | None
    replayed: artifacts.CompileOutput | None  # from_artifacts' directory
    reference: bool  # from_artifacts(reference=True)


def compile_kernel(k: KernelState, output_dir: str | Path | None) -> Compiled:
    p = k.params
    k.graph.check_unchanged("compile()")
    if k.replayed is not None:
        replay.check_runnable(k.replayed, k.backend, k.reference, k.arch)
        source, graph, signature = k.replayed.source, k.replayed.graph, k.replayed.signature
    else:
        source, graph, signature = lower(k.graph, p, k.arch)
    on_gpu = k.backend == "gpu"
    written: dict[str, Path] = {}
    if output_dir is not None:  # before the build: a source nvcc refuses is there to read and edit
        overrides = {name: k.meta_tensors[name] for name in p.meta_tensors}
        written = artifacts.write(output_dir, p.mpi_rank, source, graph, signature, overrides)
    replayed = k.replayed.directory / f"test_rank{k.replayed.signature.rank}.cu" if k.replayed is not None else None
    build_result = build(source, k.arch, on_gpu, replayed)  # a build error names the user's file of a replay
    module = Module(build_result.path) if on_gpu else None  # a cubin: nothing to load
    heap = comm.bind(k.graph, graph, p, k.backend, module, k.device)
    tensors = {name: t.data for name, t in k.graph.tensors.items()}
    inputs = RunInputs(module, source, graph, tensors, k.meta_tensors, k.batch, k.device, k.arch, k.worker_threads)
    try:
        runner, host_build = start_runner(k.backend, inputs, p, k.profiler, heap)
    except BaseException:
        if heap is not None:
            heap.close(synchronize=False)
        raise
    return Compiled(graph, build_result, runner, host_build, written)


def build(source: str, arch: str, on_gpu: bool, source_file: Path | None = None) -> BuildResult:
    """The nvcc build of ``source`` for a kernel that runs on the GPU (``on_gpu``: the shared library
    its runner loads) or does not (the cubin): from the cache, or built once. ``source_file``: the
    file the source was read from, for a build error to name (build_module)."""
    return build_module(source, arch, dispatcher.module_name_of(source), device_only=not on_gpu, source_file=source_file)
