"""Where a compiled kernel's launches run: the runner for its backend (enters: the loaded module on
the GPU, the compiled graph, the tensors; leaves: a GpuKernel, an EmulatedKernel or a
RankEmulatedKernel).

The emulator of CUDA bodies needs the same source built for the host as well (build/host.py); its
build result is returned beside the runner, for the report."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..build.cache import BuildResult
from ..build.host import build_host_module
from ..codegen import dispatcher
from ..graph.compiled import CompiledGraph
from . import host_runner
from .batching import BatchConfig
from .device_graph import LaunchConfig
from .emulator import EmulatedKernel
from .launcher import Module
from .lifecycle import GpuKernel
from .multirank import RankEmulatedKernel
from .transport import PeerHeap

Runner = GpuKernel | EmulatedKernel | RankEmulatedKernel


@dataclass
class RunInputs:
    """What every runner is made from."""

    module: Module | None  # the GPU's; None elsewhere (their nvcc build is a cubin, not loaded)
    source: str
    graph: CompiledGraph
    tensors: dict[str, torch.Tensor]
    meta: dict[str, torch.Tensor]
    batch: BatchConfig
    device: torch.device
    arch: str
    worker_threads: int


def task_time_limit(watchdog_timeout: float) -> int:
    """Seconds an emulated task body may run before it is stopped as a hang: ten times the watchdog
    timeout, at least a minute (a body runs thousands of times slower on the CPU than on the GPU)."""
    return max(60, math.ceil(10 * watchdog_timeout))


def start_runner(
    backend: str, r: RunInputs, p: Any, profiler: Any, heap: PeerHeap | None
) -> tuple[Runner | None, BuildResult | None]:
    """The runner of ``backend`` ("gpu", "emulated", "emulated-reference"; None for "compile-only")
    and, for "emulated", the host build of the source. ``p`` is the kernel's KernelParams."""
    if backend == "gpu":
        assert r.module is not None
        launch = LaunchConfig(p.num_workers, p.num_local_schedulers, p.watchdog_timeout)
        runner = GpuKernel(r.module, r.graph, r.tensors, r.meta, launch, r.batch, r.device, r.worker_threads, profiler, heap)
        return runner, None
    if backend.startswith("emulated") and p.world_size > 1:  # the ranks run together, with slice references
        return RankEmulatedKernel(r.graph, r.tensors, r.meta, r.batch, p.mpi_rank, p.world_size), None
    if backend == "emulated":
        host_build = build_host_module(r.source, r.arch, dispatcher.module_name_of(r.source), race_check=p.emulate_check)
        host = host_runner.load_module(host_build.path)
        limit = task_time_limit(p.watchdog_timeout)
        return EmulatedKernel(r.graph, r.tensors, r.meta, r.batch, host, check=p.emulate_check, time_limit_s=limit), host_build
    if backend == "emulated-reference":
        return EmulatedKernel(r.graph, r.tensors, r.meta, r.batch), None
    return None, None
