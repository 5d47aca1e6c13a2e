"""Building many cases' modules at once, before they run: a compile-only kernel of each case's graph
is built (the source depends on the graph and the arch only, so it is the module the case's own
kernel then finds in the cache), several nvcc processes at a time. On two cores this halves a cold
run's build time; a warm run pays only for graph building and a cache lookup per case."""

from __future__ import annotations

import dataclasses
import types
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import mpk_runtime as mpk

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


def _compile(pk: mpk.PersistentKernel) -> bool:
    """True when this call built the module (False: found in the cache, or a failure its run reports)."""
    try:
        pk.compile()
    except Exception:  # noqa: BLE001 - as above
        return False
    if not pk.build_result.cached:
        PREBUILT[pk.build_result.entry.name] = pk.build_result.note
    return not pk.build_result.cached


def prebuild(work: Iterable[tuple[SceneTestCase, dict[str, Any], Setup]], jobs: int) -> int:
    """Build the module of every (scene, params, setup) in ``work``, ``jobs`` nvcc processes at a
    time; graphs are made one by one meanwhile, so at most ``jobs + 1`` cases' tensors are held.
    Returns how many modules were built."""
    built = 0
    seen: set[str] = set()
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        pending: deque[Future[bool]] = deque()
        for scene, params, setup in work:
            key = f"{type(scene).__qualname__}|{setup.arch}|{params!r}"
            if key in seen:
                continue
            seen.add(key)
            pk = _kernel(scene, params, setup)
            if pk is None:
                continue
            pending.append(pool.submit(_compile, pk))
            while len(pending) > jobs:
                built += pending.popleft().result()
        built += sum(f.result() for f in pending)
    return built
