"""From the declared graph to what gets built: the dispatcher source, the compiled (scheduled,
typed) graph and the signature of a compile output directory."""

from __future__ import annotations

import torch

from ..build.artifacts import Signature
from ..codegen import dispatcher
from ..errors import DeviceError, GraphError, LayoutError
from ..graph import CompiledGraph, TaskGraph, build_compiled, build_schedule, collect_variants
from ..graph.bulk import gc_paused
from .params import KernelParams

ALIGNMENT = 16  # bytes; task bodies use 16-byte vector accesses


@gc_paused()
def lower(task_graph: TaskGraph, p: KernelParams, arch: str) -> tuple[str, CompiledGraph, Signature]:
    if not task_graph.layers:
        raise GraphError("nothing to compile: add layers (pk.<task>_layer(...)) before compile()")
    for t in task_graph.tensors.values():
        if t.kind == "intermediate" and t.read and not t.written:
            raise GraphError(f"intermediate tensor {t.name!r} is read but no layer writes it")
    variants, variant_of_layer = collect_variants(task_graph)
    source = dispatcher.generate(variants, arch, warp_jitter=p.warp_jitter)
    schedule = build_schedule(task_graph, p.num_workers, p.placement)
    graph = build_compiled(task_graph, schedule, variants, variant_of_layer, arch, p.mpi_rank)
    derived = {t.name: t.derived_from for t in task_graph.tensors.values() if t.derived_from}
    return source, graph, Signature.of(graph, derived, p)


def check_attachable(tensor: object, name: str, p: KernelParams, device: torch.device) -> None:
    """DeviceError / LayoutError for a tensor the kernel cannot use where it runs (graph/tensors.py
    checks what holds everywhere: a tensor, contiguous, a unique name)."""
    if not isinstance(tensor, torch.Tensor) or p.compile_only:  # compile-only takes any device, even "meta"
        return
    if tensor.device != device:
        where = "the CPU emulator computes on" if p.emulate else "the kernel runs on"
        raise DeviceError(f"tensor {name!r} is on {tensor.device}, but {where} {device}; pass tensor.to('{device}')")
    if tensor.device.type == "cuda" and tensor.data_ptr() % ALIGNMENT:
        raise LayoutError(
            f"tensor {name!r} starts at an address that is not {ALIGNMENT}-byte aligned (a view with "
            f"an offset?); pass tensor.clone()"
        )
