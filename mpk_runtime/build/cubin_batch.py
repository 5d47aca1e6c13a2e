"""Device-only builds of many modules in few nvcc runs: the cubins a cold run of emulated cases needs,
built together before the cases ask for them (pytest_mpk/prebuild.py), so that each case then finds
its module in the cache.

A small module's cubin is mostly nvcc's fixed cost (the CUDA headers, preprocessed and parsed: 0.6
of its 0.8 s here), so a batch of a scene class's modules (codegen/batch.py) costs a fraction of
their builds one by one: twelve linear modules 1.1 s instead of 7.7 s, twelve paged attention
modules 7.7 s instead of 14.7 s. Each module still gets an entry of its own, under its own key,
holding its own source and the batch's cubin (its ``build.json`` says ``"batch"``: how many modules
the cubin holds), so a later run, the emulator and the cache's checks see an ordinary entry.

What is not batched is built alone when its case asks for it, as before: a source that is not a
generated dispatcher, one with a task header outside csrc (a test's own task, which another
source may define differently), an entry another process is building, and every member of a
batch nvcc refuses, so that each error is reported by its own case with its own source.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import resources
from ..codegen import batch, dispatcher
from ..errors import BuildError
from . import cache, cache_fs
from .cache_fs import CUBIN, SOURCE, entry_problem, fs_errors
from .lock import free_locks
from .nvcc import compile_to, included_headers

log = logging.getLogger("mpk_runtime.build")
MAX_BATCH = 16  # modules a batch: a failed batch costs its members' time again, one by one


@dataclass(frozen=True)
class _Member:
    source: str
    part: batch.Dispatcher
    key: str
    entry: Path


def build_cubins(sources: Sequence[str], arch: str, max_batch: int = MAX_BATCH) -> list[str]:
    """Build the device-only modules of ``sources`` (generated dispatchers for ``arch``) that the
    cache lacks, up to ``max_batch`` in one nvcc run. Returns the names of the entries it published."""
    cache.check_scheduler(arch)
    members: dict[str, _Member] = {}
    for source in sources:
        member = _member(source, arch)
        if member is not None and member.key not in members:
            members[member.key] = member
    built: list[str] = []
    for jitter in (False, True):
        group = [m for m in members.values() if m.part.jitter == jitter]
        for i in range(0, len(group), max_batch):
            built += _build_batch(group[i : i + max_batch], arch)
    return built


def _member(source: str, arch: str) -> _Member | None:
    """``source`` as a batch member, or None if it is left to a build of its own (module docstring)."""
    part = batch.parse(source)
    if part is None or not all(h.is_relative_to(resources.CSRC) for h in included_headers(source)):
        return None
    key = cache.cache_key(source, arch, device_only=True)
    entry = cache.entry_path(dispatcher.module_name_of(source), arch, key, device_only=True)
    if cache.entry_is_valid(entry, key, CUBIN):
        return None
    return _Member(source, part, key, entry)


def _build_batch(members: list[_Member], arch: str) -> list[str]:
    if len(members) < 2:  # one module gains nothing from a batch: its case builds it
        return []
    with free_locks([Path(f"{m.entry}.lock") for m in members]) as held:
        mine = [m for m in members if Path(f"{m.entry}.lock") in held and entry_problem(m.entry, m.key, CUBIN) is not None]
        if len(mine) < 2:
            return []
        modules = mine[0].entry.parent
        tmp = cache_fs.temp_dir(modules, f"batch-{arch}")
        try:
            start = time.perf_counter()
            with fs_errors("write the build's files in", tmp):
                (tmp / SOURCE).write_text(batch.batch_source([m.part for m in mine], arch))
            try:
                compile_to(tmp / SOURCE, tmp / CUBIN, arch, device_only=True)
            except BuildError as e:  # each member's own build says what is wrong with it
                log.debug("mpk build cache: a batch of %d cubins failed; they are built one by one: %s", len(mine), e)
                return []
            share = (time.perf_counter() - start) / len(mine)
            for m in mine:
                _publish_member(m, arch, tmp / CUBIN, len(mine), share)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return [m.entry.name for m in mine]


def _publish_member(m: _Member, arch: str, cubin: Path, size: int, seconds: float) -> None:
    def make(tmp: Path) -> None:
        with fs_errors("write the build's files in", tmp):
            (tmp / SOURCE).write_text(m.source)
            cache_fs.link_or_copy(cubin, tmp / CUBIN)  # the same bytes for every member

    record = cache.nvcc_record(m.key, arch, dispatcher.module_name_of(m.source), device_only=True) | {"batch": size}
    cache.build_and_publish(m.entry, m.key, CUBIN, record, make, seconds)
