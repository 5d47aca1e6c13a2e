"""Building many cases' modules at once, before they run: each case's graph, made in a compile-only
kernel, is built as the case's backend builds it (a shared library for the GPU, a cubin elsewhere;
the source depends on the graph and the arch only, so it is the module the case's own kernel then
finds in the cache), several nvcc processes at a time, and the cubins several modules to one nvcc
run (mpk_runtime/build/cubin_batch.py). On two cores this halves a cold run's build time; a warm
run pays only for graph building and a cache lookup per case.

A case's generate_args and build run here for cases this process may never run (an xdist worker
builds its share of the session's cases). Any torch call of theirs that would touch the GPU raises
instead (_NoGpu), and the case is left to build its own module: code that faulted the GPU (an index
out of range on a CUDA tensor) would otherwise lose this process's CUDA context before its first GPU
case, and every GPU case of the process would fail for it, or the worker end, with the blame on a
case that did nothing wrong."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

import mpk_runtime as mpk
from mpk_runtime import harness

from . import devices
from .runner import PREBUILT, Setup, generate, kernel_params
from .scene import Out, SceneTestCase


class GpuUseInPrebuild(Exception):
    """A case's generate_args or build called torch on the GPU while the prebuild made its graph."""


def _on_gpu(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type not in ("cpu", "meta")
    if isinstance(value, torch.device):
        return value.type not in ("cpu", "meta")
    return isinstance(value, str) and re.fullmatch(r"cuda(:\d+)?", value) is not None  # not "cuda_weights.pt"


class _NoGpu(TorchFunctionMode):
    """Inside it, a torch call with a GPU tensor or a GPU device among its arguments, or a
    ``Tensor.cuda()``, raises GpuUseInPrebuild before it runs. What it cannot see: the GPU reached
    without torch (another library, ctypes)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) == "cuda" or any(_on_gpu(v) for v in tree_leaves((args, kwargs))):
            raise GpuUseInPrebuild(f"{getattr(func, '__name__', func)} would run on the GPU")
        return func(*args, **kwargs)


def _kernel(scene: SceneTestCase, params: dict[str, Any], setup: Setup) -> mpk.PersistentKernel | None:
    """The case's graph in a compile-only kernel, or None when the scene fails or touches the GPU: its
    run reports it, or builds its module itself."""
    compile_only = dataclasses.replace(setup, backend=devices.COMPILED, notes=[])
    try:
        with _NoGpu():
            args = generate(scene, params, 0)
            pk = mpk.PersistentKernel(**kernel_params(scene, params, compile_only))
            t = types.SimpleNamespace(**{n: pk.attach_input(v.tensor if isinstance(v, Out) else v, n) for n, v in args.items()})
            scene.build(pk, t, dict(params))
    except Exception:  # noqa: BLE001 - the case's own run reports it, with its params
        return None
    return pk


def _compile(pk: mpk.PersistentKernel, on_gpu: bool) -> bool:
    """True when this call built the module (False: found in the cache, or a failure its run reports)."""
    try:
        result = harness.build_for(pk, on_gpu)
    except Exception:  # noqa: BLE001 - as above
        return False
    if not result.cached:
        PREBUILT[result.entry.name] = result.note
    return not result.cached


def _cubins(sources: list[str], arch: str) -> int:
    """How many of ``sources``' cubins one batch built (0 when it failed: each case reports it)."""
    try:
        names = harness.build_cubins(sources, arch)
    except Exception:  # noqa: BLE001 - as above
        return 0
    PREBUILT.update(dict.fromkeys(names))
    return len(names)


def prebuild(work: Iterable[tuple[SceneTestCase, dict[str, Any], Setup]], jobs: int) -> int:
    """Build the module of every (scene, params, setup) in ``work``, ``jobs`` nvcc processes at a
    time; graphs are made one by one meanwhile, so at most ``jobs + 1`` cases' tensors are held (a
    cubin's case only its source, built with the others of its arch at the end). Returns how many
    modules were built."""
    built = 0
    seen: set[str] = set()
    cubins: dict[str, list[str]] = {}  # arch -> the sources of the cases that do not run on a GPU
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        pending: deque[Future[int]] = deque()
        for scene, params, setup in work:
            key = f"{type(scene).__qualname__}|{setup.arch}|{params!r}"
            if key in seen:
                continue
            seen.add(key)
            pk = _kernel(scene, params, setup)
            if pk is None:
                continue
            if setup.backend == devices.GPU:
                pending.append(pool.submit(_compile, pk, True))
            else:
                with contextlib.suppress(Exception):  # its run reports it
                    cubins.setdefault(setup.arch, []).append(harness.source_of(pk))
            while len(pending) > jobs:
                built += pending.popleft().result()
        for arch, sources in cubins.items():  # a batch for each job: both cores busy
            size = max(2, -(-len(sources) // max(1, jobs)))
            pending.extend(pool.submit(_cubins, sources[i : i + size], arch) for i in range(0, len(sources), size))
        built += sum(f.result() for f in pending)
    return built
