"""Communication tensors at compile(): their memory, where the kernel runs.

On the GPU they live in the rank's communication heap (run/transport.py), which compile() allocates
and maps with every other rank's (a collective step: every rank compiles). Emulated, they are CPU
tensors (the multi-rank emulator moves the data between ranks itself); compile-only, placeholders.
"""

from __future__ import annotations

import torch

from ..errors import StateError
from ..graph import CompiledGraph, TaskGraph
from ..run import bootstrap, transport
from ..run.launcher import Module
from ..run.multirank import RankEmulatedKernel, run_ranks
from .params import KernelParams


def bind(
    graph: TaskGraph, compiled: CompiledGraph, p: KernelParams, backend: str, module: Module | None, device: torch.device
) -> transport.PeerHeap | None:
    """Give every communication tensor of ``graph`` its memory for ``backend``; the heap on the GPU,
    allocated through ``module`` (the loaded GPU module; None off the GPU)."""
    tensors = [t for t in graph.tensors.values() if t.kind == "comm"]
    if not tensors or backend == "compile-only":
        return None
    if backend.startswith("emulated"):
        for t in tensors:
            t.bind(torch.zeros(t.shape, dtype=t.dtype.torch))
        return None
    assert module is not None
    layout = transport.plan([(t.name, t.data.numel() * t.dtype.itemsize) for t in tensors], len(compiled.tasks), p.world_size)
    world = bootstrap.require_world(p.world_size, p.mpi_rank) if p.world_size > 1 else None
    heap = transport.PeerHeap(
        module, device, layout, p.mpi_rank, p.world_size, world, transport.fingerprint(compiled, layout), p.comm_timeout
    )
    for t in tensors:
        t.bind(heap.view(t.name, t.shape, t.dtype.torch))
    return heap


def run_emulated_ranks(kernels: list, seed: int = 0) -> None:
    """One launch of a multi-rank graph on the CPU emulator: ``kernels[r]`` is rank r's compiled
    PersistentKernel (``emulate=True``, ``world_size=len(kernels)``, ``mpi_rank=r``), all in this
    process. Their workers are interleaved by one scheduler seeded with ``seed``; a deadlock raises the
    WatchdogError a device watchdog would, naming the rank each stuck task waits for."""
    if not isinstance(kernels, (list, tuple)):
        raise StateError(f"run_emulated_ranks: kernels={kernels!r} must be a list of every rank's kernel, in rank order")
    runners = []
    for r, pk in enumerate(kernels):
        runner = getattr(pk, "_runner", None)
        if not isinstance(runner, RankEmulatedKernel):
            raise StateError(
                f"run_emulated_ranks: kernels[{r}] is not a compiled emulated kernel with world_size > 1 "
                f"(PersistentKernel(emulate=True, world_size={len(kernels)}, mpi_rank={r}, ...), then compile())"
            )
        runners.append(runner)
    run_ranks(runners, seed)
