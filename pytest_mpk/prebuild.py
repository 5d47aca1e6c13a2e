"""Building many cases' modules at once, before they run: each case's graph, made in a compile-only
kernel, is built as the case's backend builds it (a shared library for the GPU, a cubin elsewhere;
the source depends on the graph and the arch only, so it is the module the case's own kernel then
finds in the cache), several nvcc processes at a time, and the cubins several modules to one nvcc
run (mpk_runtime/build/cubin_batch.py). On two cores this halves a cold run's build time; a warm
run pays only for graph building and a cache lookup per case."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import mpk_runtime as mpk
from mpk_runtime import harness

from . import devices
from .runner import PREBUILT, Setup, generate, kernel_params
from .scene import Out, SceneTestCase


def _kernel(scene: SceneTestCase, params: dict[str, Any], setup: Setup) -> mpk.PersistentKernel | None:
    """The case's graph in a compile-only kernel, or None when the scene fails: its run reports it."""
    compile_only = dataclasses.replace(setup, backend=devices.COMPILED, notes=[])
    try:
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
